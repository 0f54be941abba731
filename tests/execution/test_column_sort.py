"""ORDER BY over column batches against the tuple sort: NULL keys, edge tiles, no tuple, one tuple, spilled runs."""
from __future__ import annotations

import numpy as np
import pytest

from helpers.column_paths import same_rows, sorted_both_ways
from trdb.execution.column_batch import ColumnBatch


@pytest.mark.parametrize("order", ["si, T.j DESC", "si DESC, T.i", "T.j, si DESC, T.i DESC"])
def test_order_by_null_keys_as_the_tuple_sort(pairs, monkeypatch, order, every_run_stacked):
    cur, _ = pairs
    sql = (f"SELECT T.i, T.j, S.i AS si, T.v, S.v AS w FROM T FULL JOIN S ON T.i = S.i AND T.j = S.j "
           f"WHERE T.i < 10 OR S.i < 10 ORDER BY {order}")
    as_columns, as_tuples, sorts = sorted_both_ways(cur, monkeypatch, sql)
    same_rows(as_columns, as_tuples)
    assert sorts and all(s is not None for s in sorts)
    assert any(r[2] is None for r in as_columns) and any(r[0] is None for r in as_columns)


def test_order_by_over_edge_tiles_no_tuples_one_tuple_and_alternating_layouts(cur, monkeypatch, every_run_stacked):
    cur.execute("SET workers = 1")
    cur.execute("CREATE TENSOR A FROM ? TILE (4, 4)", [np.arange(66 * 66, dtype=np.float32).reshape(66, 66)])
    for where, count in (("A.i > 20", 0), ("A.i = 2 AND A.j = 3", 1), ("A.i < 20", 17 * 17)):
        sql = f"SELECT A.i, A.j, A.v FROM A WHERE {where} ORDER BY A.j DESC, A.i"
        as_columns, as_tuples, sorts = sorted_both_ways(cur, monkeypatch, sql)
        same_rows(as_columns, as_tuples)
        assert len(as_columns) == count and sorts[0] is not None
    assert {r[2].shape for r in as_columns} == {(4, 4), (2, 4), (4, 2), (2, 2)}  # edge tiles in runs of their own
    cur.execute("CREATE TENSOR B FROM ? TILE (4, 4)", [np.arange(66 * 6, dtype=np.float32).reshape(66, 6)])
    as_columns, as_tuples, sorts = sorted_both_ways(cur, monkeypatch, "SELECT B.i, B.j, B.v FROM B ORDER BY B.i, B.j")
    same_rows(as_columns, as_tuples)
    assert sorts == [None]  # full and edge tiles alternate: runs of one tuple would cost more than tuples


def test_order_by_past_memory_limit_merges_column_batches_as_tuples(cur, monkeypatch):
    cur.execute("SET workers = 1")
    a = np.random.default_rng(2).standard_normal((2048, 8)).astype(np.float32)
    cur.execute("CREATE TENSOR A FROM ? TILE (1, 8)", [a])
    expected = cur.execute("SELECT A.i, A.j, A.v FROM A ORDER BY A.i DESC").fetchall()
    cur.execute("SET memory_limit = '64KB'")
    got = cur.execute("SELECT A.i, A.j, A.v FROM A ORDER BY A.i DESC").fetchall()
    same_rows(got, expected)
    assert [r[0] for r in got] == list(range(2047, -1, -1))


def test_column_sort_orders_as_python_sort_does():
    from trdb.execution.tile_math.column_sort import sorted_batches
    rng = np.random.default_rng(6)
    batches = []
    for n in (0, 1, 300, 57):
        first = np.ma.MaskedArray(rng.integers(-3, 3, n), rng.random(n) < 0.2)
        batches.append(ColumnBatch([first, rng.integers(0, 4, n), np.arange(n, dtype=np.float64) + 1000 * len(batches)],
                                   (False, False, True)))
    for descending in [(False, False), (True, False), (False, True), (True, True)]:
        for high in [(True, True), (False, True)]:  # NULLS LAST ascending / FIRST descending, and the other way
            rows = [row for b in batches for row in b]
            for position, down, up in reversed(list(zip((0, 1), descending, high))):
                rows.sort(key=lambda r: (r[position] is None if up else r[position] is not None,
                                         r[position] if r[position] is not None else 0), reverse=down)
            got = [row for part in sorted_batches(batches, (0, 1), descending, high) for row in part]
            assert [(r[0], r[1], float(r[2])) for r in got] == [(r[0], r[1], float(r[2])) for r in rows]
