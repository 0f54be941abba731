"""Many small tiles through the relational operators: MIN / MAX by group, LEFT and FULL joins, ORDER BY, over n tuples of
8 x 8 float32 tiles, in trdb against DuckDB on the same rows stored as FLOAT[64] arrays and numpy on the stacked array.

    python benchmarks/small_tile_operators.py                  # n = 200,000
    python benchmarks/small_tile_operators.py --tuples 50000   # another size

T holds n tiles (keys i = 0..n-1, j = 0), S every other one (the even i): half of T's tuples have no
partner in S. Each statement runs `--repeats` times, the three taking turns (benchmarks/timing.py);
medians are compared (trdb / peer), with microseconds a tuple of T. A trdb statement is timed to its
result held (`execute`: the spool of result tuples), DuckDB's to its result as an Arrow table; the
results are checked against numpy after the timed runs.
"""
from __future__ import annotations

import argparse
import statistics

import duckdb
import numpy as np
import pyarrow as pa

import trdb
from timing import alternating_runs

ELEMENTS = ", ".join(f"{{f}}(v[{k}])" for k in range(1, 65))  # DuckDB's elementwise aggregate of FLOAT[64]


def cases(n: int) -> dict:
    """label: (trdb statement, DuckDB statement, numpy peer, check of trdb's cursor against the data)."""
    half = np.arange(0, n, 2)
    return {
        "MAX(v) GROUP BY i // 8": (
            "SELECT T.i // 8 AS g, MAX(T.v) AS v FROM T GROUP BY T.i // 8",
            f"SELECT i // 8 AS g, array_value({ELEMENTS.format(f='max')}) AS v FROM t GROUP BY g",
            lambda a: a[: n - n % 8].reshape(-1, 8, 8, 8).max(axis=1),
            lambda cur, a: _tensor(cur, np.stack([a[g * 8:(g + 1) * 8].max(axis=0) for g in range(-(-n // 8))]))),
        "MIN(v), MAX(v) GROUP BY j": (
            "SELECT T.j AS j, MIN(T.v) AS lo, MAX(T.v) AS hi FROM T GROUP BY T.j",
            f"SELECT j, array_value({ELEMENTS.format(f='min')}), array_value({ELEMENTS.format(f='max')}) "
            "FROM t GROUP BY j",
            lambda a: (a.min(axis=0), a.max(axis=0)),
            lambda cur, a: _min_max(cur, a)),
        "T LEFT JOIN S": (
            "SELECT T.i AS i, T.j AS j, T.v AS v, S.v AS w FROM T LEFT JOIN S ON T.i = S.i AND T.j = S.j",
            "SELECT t.i, t.j, t.v, coalesce(s.v, array_value(" + ", ".join(["0::FLOAT"] * 64) + ")) AS w "
            "FROM t LEFT JOIN s ON t.i = s.i AND t.j = s.j",
            lambda a: (a, _with_zeros(a, half)),
            lambda cur, a: _joined(cur, a, half)),
        "T.v + S.v, T LEFT JOIN S": (
            "SELECT T.i AS i, T.j AS j, T.v + S.v AS v FROM T LEFT JOIN S ON T.i = S.i AND T.j = S.j",
            None,
            lambda a: a + _with_zeros(a, half),
            lambda cur, a: _tensor(cur, a + _with_zeros(a, half))),
        "T FULL JOIN S": (
            "SELECT T.i AS i, S.i AS k, T.v AS v, S.v AS w FROM T FULL JOIN S ON T.i = S.i AND T.j = S.j",
            "SELECT t.i, s.i AS k, t.v, s.v AS w FROM t FULL JOIN s ON t.i = s.i AND t.j = s.j",
            lambda a: (a, _with_zeros(a, half)),
            lambda cur, a: _count(cur, n)),
        "COALESCE keys, T.v + S.v, FULL": (
            "SELECT COALESCE(T.i, S.i) AS i, COALESCE(T.j, S.j) AS j, T.v + S.v AS v "
            "FROM T FULL JOIN S ON T.i = S.i AND T.j = S.j",
            None,
            lambda a: a + _with_zeros(a, half),
            lambda cur, a: _tensor(cur, a + _with_zeros(a, half))),
        "T JOIN S, residual j >= j": (
            "SELECT T.i AS i, T.j AS j, T.v AS v, S.v AS w FROM T JOIN S ON T.i = S.i AND T.j >= S.j",
            "SELECT t.i, t.j, t.v, s.v AS w FROM t JOIN s ON t.i = s.i AND t.j >= s.j",
            lambda a: (a[half], a[half]),
            lambda cur, a: _count(cur, len(half))),
        "ORDER BY i DESC": (
            "SELECT T.i AS i, T.j AS j, T.v AS v FROM T ORDER BY i DESC",
            "SELECT i, j, v FROM t ORDER BY i DESC",
            lambda a: a[::-1].copy(),
            lambda cur, a: _ordered(cur, a)),
    }


def _with_zeros(a: np.ndarray, present: np.ndarray) -> np.ndarray:
    out = np.zeros_like(a)
    out[present] = a[present]
    return out


def _tensor(cur, expected: np.ndarray) -> None:
    """The result's tiles, in the order of its first key, are `expected`'s."""
    columns = cur.fetchnumpy()
    first, value = list(columns)[0], list(columns)[-1]
    order = np.argsort(columns[first])
    assert np.array_equal(columns[first][order], np.arange(len(expected)))
    np.testing.assert_array_equal(np.stack(columns[value])[order], expected)


def _min_max(cur, a: np.ndarray) -> None:
    (row,) = cur.fetchall()
    np.testing.assert_array_equal(row[1], a.min(axis=0))
    np.testing.assert_array_equal(row[2], a.max(axis=0))


def _joined(cur, a: np.ndarray, half: np.ndarray) -> None:
    columns = cur.fetchnumpy()
    order = np.argsort(columns["i"])
    np.testing.assert_array_equal(np.stack(columns["v"])[order], a)
    np.testing.assert_array_equal(np.stack(columns["w"])[order], _with_zeros(a, half))


def _count(cur, n: int) -> None:
    assert len(cur.fetchall()) == n


def _ordered(cur, a: np.ndarray) -> None:
    rows = cur.fetchmany(1000)
    assert [r[0] for r in rows] == list(range(len(a) - 1, len(a) - 1001, -1))
    np.testing.assert_array_equal(rows[5][2], a[-6])


def load(n: int) -> tuple:
    """T and S in trdb and in DuckDB (FLOAT[64] rows), and the stacked array."""
    data = np.random.default_rng(0).standard_normal((n, 8, 8)).astype(np.float32)
    con = trdb.connect()
    con.execute("CREATE TENSOR T FROM ? TILE (8, 8)", [data.reshape(n * 8, 8)])
    con.execute("CREATE TENSOR S AS SELECT T.i AS i, T.j AS j, T.v AS v FROM T WHERE T.i % 2 = 0")
    duck = duckdb.connect()
    values = pa.FixedSizeListArray.from_arrays(pa.array(data.reshape(-1)), 64)
    keys = np.arange(n, dtype=np.int64)
    duck.register("rows_in", pa.table({"i": keys, "j": np.zeros(n, np.int64), "v": values}))
    duck.execute("CREATE TABLE t AS SELECT i, j, v::FLOAT[64] AS v FROM rows_in")
    duck.execute("CREATE TABLE s AS SELECT * FROM t WHERE i % 2 = 0")
    return con, duck, data


def measure(n: int, repeats: int, only: list[str]) -> None:
    con, duck, data = load(n)
    print(f"\nn = {n:,} tiles of 8 x 8 float32 (S: every other one)")
    print(f"{'statement':28} {'trdb':>9} {'DuckDB':>9} {'numpy':>9} {'/DuckDB':>8} {'/numpy':>7} {'us/tuple':>9}")
    for label, (trql, sql, peer, check) in cases(n).items():
        if only and not any(o in label for o in only):
            continue
        runs = {"trdb": lambda: con.execute(trql), "numpy": lambda: peer(data)}
        if sql is not None:
            runs["duckdb"] = lambda: duck.sql(sql).to_arrow_table()
        measured = alternating_runs(repeats, runs)
        check(measured["trdb"][1], data)
        med = {name: statistics.median(times) for name, (times, _) in measured.items()}
        duck_time = f"{med['duckdb']:8.3f}s" if "duckdb" in med else f"{'-':>9}"
        duck_ratio = f"{med['trdb'] / med['duckdb']:7.1f}x" if "duckdb" in med else f"{'-':>8}"
        print(f"{label:28} {med['trdb']:8.3f}s {duck_time} {med['numpy']:8.3f}s {duck_ratio} "
              f"{med['trdb'] / med['numpy']:6.1f}x {1e6 * med['trdb'] / n:9.2f}")
    con.close()
    duck.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuples", type=int, nargs="+", default=[200_000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", nargs="*", default=[], help="statements whose label holds one of these words")
    args = parser.parse_args()
    for n in args.tuples:
        measure(n, args.repeats, args.only)


if __name__ == "__main__":
    main()
