"""Random queries over integer columns with NULLs (tables and their joins), written once for trdb's engine (a tensor of
one tuple cross-joined in, so that trdb plans and runs them) and once for DuckDB on the tables alone: the same answer
is expected of both (key arithmetic, comparisons, three-valued logic, IN with NULL, COALESCE, GROUP BY, HAVING,
ORDER BY with NULLs, LIMIT / OFFSET)."""
from __future__ import annotations

import random


def table_rows(r: random.Random) -> tuple[list, list]:
    """Rows of t (id, a, b, c) and u (k, m), NULLs among them."""
    def maybe(low: int, high: int, share: float):
        return None if r.random() < share else r.randint(low, high)
    t = [(i, maybe(-6, 8, 0.1), maybe(-6, 8, 0.15), maybe(0, 5, 0.2)) for i in range(30)]
    u = [(k, maybe(0, 5, 0.3)) for k in r.sample(range(-6, 9), 8)]
    return t, u


def values_sql(rows: list) -> str:
    return ", ".join("(" + ", ".join("NULL" if v is None else str(v) for v in row) + ")" for row in rows)


def _expr(r: random.Random, depth: int = 0) -> str:
    if depth > 2 or r.random() < 0.35:
        return r.choice(["t.a", "t.b", "t.c", str(r.randint(-5, 9))])
    op = r.choice(["+", "-", "*", "//", "%"])
    right = str(r.choice([1, 2, 3, -2, 7])) if op in ("//", "%") else _expr(r, depth + 1)
    return f"({_expr(r, depth + 1)} {op} {right})"


def _condition(r: random.Random, depth: int = 0) -> str:
    k = r.random()
    if depth < 2 and k < 0.25:
        return f"({_condition(r, depth + 1)} {r.choice(['AND', 'OR'])} {_condition(r, depth + 1)})"
    if depth < 2 and k < 0.32:
        return f"NOT ({_condition(r, depth + 1)})"
    if k < 0.45:
        return f"{_expr(r, 1)} {r.choice(['IS NULL', 'IS NOT NULL'])}"
    if k < 0.55:
        low = r.randint(-5, 5)
        return f"{_expr(r, 1)} {r.choice(['', 'NOT '])}BETWEEN {low} AND {low + r.randint(0, 6)}"
    if k < 0.65:
        items = ", ".join(r.choice([str(r.randint(-3, 6))] * 5 + ["NULL"]) for _ in range(r.randint(1, 4)))
        return f"{_expr(r, 1)} {r.choice(['', 'NOT '])}IN ({items})"
    return f"{_expr(r, 1)} {r.choice(['=', '<>', '<', '<=', '>', '>='])} {_expr(r, 1)}"


def query(r: random.Random) -> tuple[str, str]:
    """One query, as trdb runs it and as DuckDB does."""
    where = f" WHERE {_condition(r)}" if r.random() < 0.8 else ""
    join = r.choice(["", "", " LEFT JOIN u ON u.k = t.a", " JOIN u ON u.k = t.b", " FULL JOIN u ON u.k = t.c"])
    if r.random() < 0.5:
        group = r.choice(["t.a", "t.b % 3", "COALESCE(t.c, -1)"])
        calls = r.sample(["COUNT(*)", "COUNT(t.b)", "SUM(t.a)", "MIN(t.b)", "MAX(t.c)", "AVG(t.a)", "SUM(t.b * 2 - t.c)"], 3)
        having = f" HAVING {r.choice(['COUNT(*) > 1', 'MAX(t.b) > 2', 'SUM(t.a) IS NOT NULL'])}" if r.random() < 0.4 else ""
        select = ", ".join([f"{group} AS g"] + [f"{c} AS x{i}" for i, c in enumerate(calls)])
        sql = f"SELECT {select} FROM t{join}{{one}}{where} GROUP BY g{having} ORDER BY 1{{nulls}}"
    else:
        columns = [_expr(r) for _ in range(r.randint(1, 3))] + (["COALESCE(u.m, t.c, -9)", "u.k"] if join else [])
        select = ", ".join(f"{c} AS y{i}" for i, c in enumerate(columns)) + ", t.id AS id"
        order = ", ".join(str(i + 1) + r.choice(["", " DESC{desc}"]) for i in range(len(columns) + 1))
        limit = (f" LIMIT {r.randint(0, 8)}" + (f" OFFSET {r.randint(0, 4)}" if r.random() < 0.5 else "")) \
            if r.random() < 0.4 else ""
        sql = f"SELECT {select} FROM t{join}{{one}}{where} ORDER BY {order}{limit}"
    # trdb orders NULLs as PostgreSQL does (last ascending, first descending): DuckDB is told so
    ours = sql.replace("{one}", " CROSS JOIN one AS o").replace("{nulls}", "").replace("{desc}", "")
    theirs = sql.replace("{one}", "").replace("{nulls}", " NULLS LAST").replace("{desc}", " NULLS FIRST")
    return ours, theirs


def normalized(rows: list) -> list:
    """Rows with floats rounded (AVG) and numpy integers as Python ints."""
    return [tuple(round(float(v), 6) if isinstance(v, float) else (v if v is None else int(v)) for v in row)
            for row in rows]
