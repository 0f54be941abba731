"""Bound expressions as SQL-like text for EXPLAIN: the kernels each operator runs, over named columns."""
from __future__ import annotations

from trdb.plan import expressions as bx
from trdb.plan.types import Schema


def column_names(schema: Schema) -> list[str]:
    """Each input column's name, numbered where a join made names repeat (v, v#2)."""
    names: list[str] = []
    seen: dict[str, int] = {}  # a counter per name: a many-way join has hundreds of columns
    for column in schema:
        repeats = seen.get(column.name, 0)
        seen[column.name] = repeats + 1
        names.append(f"{column.name}#{repeats + 1}" if repeats else column.name)
    return names


def render(expr: bx.Bound, names: list[str]) -> str:
    if isinstance(expr, bx.ColumnIndex):
        return names[expr.index]
    if isinstance(expr, bx.Const):
        return repr(expr.value) if isinstance(expr.value, str) else str(expr.value)
    if isinstance(expr, bx.Call):
        return _call(expr, names)
    if isinstance(expr, (bx.KeyArith, bx.Compare)):
        return f"({render(expr.left, names)} {expr.op} {render(expr.right, names)})"
    if isinstance(expr, bx.Logical):
        return "(" + f" {expr.op} ".join(render(a, names) for a in expr.args) + ")"
    if isinstance(expr, bx.Not):
        return f"NOT {render(expr.arg, names)}"
    if isinstance(expr, bx.InSet):
        values = ", ".join(str(v) for v in sorted(expr.values, key=str))
        return f"{render(expr.arg, names)} {'NOT IN' if expr.negated else 'IN'} ({values})"
    if isinstance(expr, bx.IsNullTest):
        return f"{render(expr.arg, names)} IS {'NOT NULL' if expr.negated else 'NULL'}"
    if isinstance(expr, bx.Coalesce):
        return "COALESCE(" + ", ".join(render(a, names) for a in expr.args) + ")"
    return type(expr).__name__


def _call(expr: bx.Call, names: list[str]) -> str:
    args = [render(a, names) for a in expr.args]
    symbol = expr.function.label.removeprefix("operator ")
    if expr.function.label.startswith("operator "):
        return f"({args[0]} {symbol} {args[1]})" if len(args) == 2 else f"{symbol}{args[0]}"
    return f"{expr.function.name}({', '.join(args)})"


def assignments(exprs: tuple[bx.Bound, ...], output: Schema, input_schema: Schema) -> str:
    """A projection's outputs: a column passed through by its name, a computed one as name = expression."""
    names = column_names(input_schema)
    parts = []
    for column, expr in zip(output, exprs):
        text = render(expr, names)
        parts.append(column.name if text == column.name else f"{column.name} = {text}")
    return ", ".join(parts)
