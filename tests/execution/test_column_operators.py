"""MIN / MAX by group, outer joins and ORDER BY over column batches: against numpy and the tuple-by-tuple path, over
batches of edge tiles, sparse tiles, NULL keys, no tuples and one tuple."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import trdb
from helpers.logic_runner import logic_files, run_file
from test_random_queries import REGRESSION_SEEDS, SEEDS, build_case, check_dense, check_rows, run_case
from trdb.execution.column_batch import ColumnBatch
from trdb.storage import tile_codec, tile_runs

SQL_ROOT = Path(__file__).parent.parent / "sql"


@pytest.fixture
def every_run_stacked(monkeypatch):
    """Every run of dense tiles of one shape read as column batches, however short: small tensors of the logic
    files and random queries go through the operators' column paths, edge tiles in batches of their own."""
    monkeypatch.setattr(tile_runs, "MIN_RUN", 1)
    monkeypatch.setattr(tile_codec, "MIN_RUN", 1)


@pytest.mark.parametrize("seed", SEEDS + list(REGRESSION_SEEDS), ids=lambda s: f"seed{s:03d}")
def test_random_queries_over_column_batches(seed, every_run_stacked):
    case = build_case(seed)
    try:
        rows, dense = run_case(case)
    except Exception as error:  # the failure shows the case, whatever the engine raised
        pytest.fail(f"{case.describe()}\nraised {type(error).__name__}: {error}")
    problems = check_rows(case, rows) + (check_dense(case, dense) if dense is not None else [])
    assert not problems, f"{case.describe()}\n" + "\n".join(problems[:8])


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("path", logic_files(SQL_ROOT), ids=lambda p: str(p.relative_to(SQL_ROOT)))
def test_logic_files_over_column_batches(path, workers, every_run_stacked):
    run_file(path, setup=(f"SET workers = {workers}",))


# ------------------------------------------------------------ MIN and MAX by group

def _seen_by_groups(monkeypatch) -> list:
    """The batches the aggregates' arrays took (tile_math/column_groups.py)."""
    from trdb.execution.tile_math import column_groups
    seen, real = [], column_groups.ColumnGroups.add

    def add(self, keys, values):
        seen.append(len(keys))
        return real(self, keys, values)
    monkeypatch.setattr(column_groups.ColumnGroups, "add", add)
    return seen


@pytest.mark.parametrize("arrival", ["box", "parts"])
def test_min_and_max_by_a_rekey_match_numpy(cur, arrival, monkeypatch):
    from trdb.execution.tile_math import column_groups
    monkeypatch.setattr(column_groups, "COMPACT_ROWS", 8)  # parts merge often
    if arrival == "parts":
        monkeypatch.setattr(column_groups, "DENSE_SHARE", 0)  # never a box
    seen = _seen_by_groups(monkeypatch)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((600, 6)).astype(np.float32)
    cur.execute("CREATE TENSOR A FROM ? TILE (2, 3)", [a])  # keys i in 0..299, j in 0..1
    rows = cur.execute("SELECT A.i // 7 AS g, A.j AS j, MIN(A.v * 2) AS lo, MAX(A.v) AS hi, COUNT(*) AS n "
                       "FROM A GROUP BY A.i // 7, A.j").fetchall()
    tiles = a.reshape(300, 2, 2, 3).transpose(0, 2, 1, 3)  # [i, j] -> the 2 x 3 tile
    assert seen and len(rows) == 43 * 2
    for g, j, lo, hi, n in rows:
        group = tiles[g * 7:(g + 1) * 7, j]
        np.testing.assert_array_equal(lo, (group * 2).min(axis=0))
        np.testing.assert_array_equal(hi, group.max(axis=0))
        assert n == len(group) and lo.dtype == np.float32


def test_min_and_max_of_edge_tiles_and_one_tuple_groups(cur, monkeypatch, every_run_stacked):
    seen = _seen_by_groups(monkeypatch)
    a = np.random.default_rng(5).standard_normal((64, 30)).astype(np.float32)
    cur.execute("CREATE TENSOR A FROM ? TILE (4, 8)", [a])  # column j = 3 holds edge tiles of 4 x 6
    by_column = dict((j, (lo, hi)) for j, lo, hi in cur.execute(
        "SELECT A.j AS j, MIN(A.v) AS lo, MAX(A.v) AS hi FROM A GROUP BY A.j").fetchall())
    for j in range(4):
        block = a[:, j * 8:(j + 1) * 8].reshape(16, 4, -1)
        np.testing.assert_array_equal(by_column[j][0], block.min(axis=0))
        np.testing.assert_array_equal(by_column[j][1], block.max(axis=0))
    singles = cur.execute("SELECT A.i AS i, A.j AS j, MAX(A.v) AS v FROM A GROUP BY A.i, A.j").fetch_tensor()
    np.testing.assert_array_equal(singles, a)
    assert seen


def test_min_and_max_keep_nan_and_infinities_as_the_fold_does(cur):
    a = np.arange(32 * 4, dtype=np.float32).reshape(32, 4)
    a[3, 1], a[7, 2], a[9, 3] = np.nan, np.inf, -np.inf
    cur.execute("CREATE TENSOR A FROM ? TILE (1, 4)", [a])
    lo, hi = cur.execute("SELECT MIN(A.v) AS lo, MAX(A.v) AS hi FROM A").fetchone()
    np.testing.assert_array_equal(lo, np.minimum.reduce(a, axis=0, keepdims=True))
    np.testing.assert_array_equal(hi, np.maximum.reduce(a, axis=0, keepdims=True))
    assert np.isnan(lo[0, 1]) and np.isnan(hi[0, 1]) and hi[0, 2] == np.inf and lo[0, 3] == -np.inf
    none = cur.execute("SELECT MAX(A.v) AS v FROM A WHERE A.i > 100").fetchall()
    np.testing.assert_array_equal(none[0][0], np.zeros((1, 4), np.float32))  # over no tuples: a zero tile


def test_min_and_max_in_a_box_match_a_fold():
    from trdb.execution.tile_math.column_groups import ColumnGroups
    rng = np.random.default_rng(8)
    groups = ColumnGroups(["MIN", "MAX", "COUNT"])
    expected: dict = {}
    for _ in range(6):
        keys = rng.integers(0, 50, (40, 1)).astype(np.int64)
        values = rng.standard_normal((40, 3))
        groups.add(keys, [values, -values, None])
        for key, value in zip(keys.ravel().tolist(), values):
            lo, hi, n = expected.get(key, (value, -value, 0))
            expected[key] = (np.minimum(lo, value), np.maximum(hi, -value), n + 1)
    assert groups.box is not None
    keys, counts, (lo, hi, _) = groups.groups()
    assert keys.ravel().tolist() == sorted(expected) and counts.tolist() == [expected[k][2] for k in sorted(expected)]
    np.testing.assert_array_equal(lo, np.stack([expected[k][0] for k in sorted(expected)]))
    np.testing.assert_array_equal(hi, np.stack([expected[k][1] for k in sorted(expected)]))


@pytest.mark.parametrize("groups", [1, 200, 5000], ids=["one", "mixed", "mostly-single"])
def test_segment_minima_and_maxima_match_reduceat(groups):
    from trdb.execution.tile_math.column_groups import _segment_sums
    rng = np.random.default_rng(groups)
    values = rng.standard_normal((6000, 2, 3))
    order = np.argsort(rng.integers(0, groups, 6000), kind="stable")
    keys = rng.integers(0, groups, 6000)[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    for ufunc in (np.minimum, np.maximum):
        expected = ufunc.reduceat(values[order], starts, axis=0)
        np.testing.assert_array_equal(_segment_sums(values, order, starts, ufunc), expected)


# ------------------------------------------------------------ key expressions on arrays

def _keys_batch() -> ColumnBatch:
    i = np.ma.MaskedArray(np.array([0, 7, -3, 12, 5], np.int64), [False, False, False, True, False])
    return ColumnBatch([i, np.array([2, 0, 3, 1, 5], np.int64), np.ones((5, 2), np.float32)], (False, False, True))


def test_key_expressions_on_arrays_give_what_the_closures_give():
    from trdb.execution.tile_math.compile import compile_expr, compile_predicate
    from trdb.execution.tile_math.key_columns import key_function, predicate_function
    from trdb.kernels.numpy_backend import NUMPY_BACKEND
    from trdb.plan import expressions as bx
    from trdb.plan.types import KEY
    i, j, c = bx.ColumnIndex(0, KEY), bx.ColumnIndex(1, KEY), lambda v: bx.Const(v, KEY)
    batch = _keys_batch()
    expressions = [bx.KeyArith("//", i, c(3)), bx.KeyArith("%", i, c(-4)), bx.KeyArith("*", i, j),
                   bx.Coalesce((i, j)), bx.KeyArith("-", c(0), i)]
    for expr in expressions:
        got = key_function(expr)(batch)
        closure = compile_expr(expr, NUMPY_BACKEND)
        assert np.ma.MaskedArray(got).tolist() == [closure(row) for row in batch], expr
    conditions = [bx.Compare("<", i, j), bx.Not(bx.Compare("=", i, c(7))), bx.IsNullTest(i),
                  bx.Logical("OR", (bx.Compare(">=", i, c(5)), bx.InSet(j, frozenset({0, 3})))),
                  bx.InSet(i, frozenset({12, 0}), negated=True)]
    for expr in conditions:
        closure = compile_predicate(expr, NUMPY_BACKEND)
        assert predicate_function(expr)(batch).tolist() == [closure(row) for row in batch], expr


def test_key_expressions_the_arrays_cannot_answer_go_tuple_by_tuple(cur):
    from trdb.execution.tile_math.key_columns import key_function
    from trdb.plan import expressions as bx
    from trdb.plan.types import KEY
    batch = _keys_batch()
    i, j = bx.ColumnIndex(0, KEY), bx.ColumnIndex(1, KEY)
    assert key_function(bx.KeyArith("//", i, j)) is not None
    assert key_function(bx.KeyArith("//", j, bx.KeyArith("-", j, j)))(batch) is None  # by zero: the closure says
    big = ColumnBatch([np.array([2 ** 40], np.int64)], (False,))
    assert key_function(bx.KeyArith("*", i, i))(big) is None  # past int64 maybe: Python ints decide
    assert key_function(bx.ColumnIndex(2, KEY))(batch) is None  # a tile column
    cur.execute("CREATE TENSOR A FROM ? TILE (1, 2)", [np.ones((40, 2), np.float32)])
    with pytest.raises(trdb.DataError, match="division by zero"):
        cur.execute("SELECT A.i // A.j AS g, MAX(A.v) AS v FROM A GROUP BY A.i // A.j").fetchall()


# ------------------------------------------------------------ outer joins

def _same_rows(got: list, expected: list) -> None:
    """The same tuples in the same order: keys (None included) equal, tiles of equal shape, dtype and values."""
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            if isinstance(y, np.ndarray):
                assert type(x) is np.ndarray and x.shape == y.shape and x.dtype == y.dtype, (a, b)
                np.testing.assert_array_equal(x, y)
            else:
                assert x == y and type(x) is type(y), (a, b)


def _as_tuples_too(cur, monkeypatch, sql: str) -> tuple[list, list, list]:
    """A query's rows joined as columns, and as a dict join gives them (no column table); and each probe
    batch's size that went as columns."""
    from trdb.execution.tile_math import column_join
    probes, real = [], column_join.ColumnTable.probe

    def watched(self, batch, keys, *fill):
        probes.append(len(batch))
        yield from real(self, batch, keys, *fill)
    monkeypatch.setattr(column_join.ColumnTable, "probe", watched)
    as_columns = cur.execute(sql).fetchall()
    with monkeypatch.context() as patched:
        patched.setattr("trdb.execution.operators.hash_join.build_table", lambda batches, keys: None)
        as_tuples = cur.execute(sql).fetchall()
    return as_columns, as_tuples, probes


@pytest.fixture
def pairs(cur):
    """T: 11 x 5 tiles of 4 x 4 of a 42 x 20 array (row i = 10: edge tiles of 2 x 4) but its row i = 8; S: the
    full tiles of the array's even rows, times 3. T's odd rows and edge row meet nothing, S's row 8 no T."""
    rng = np.random.default_rng(12)
    a = rng.standard_normal((42, 20)).astype(np.float32)
    cur.execute("SET workers = 1")  # one order of tuples, whatever path they take
    cur.execute("CREATE TENSOR A FROM ? TILE (4, 4)", [a])
    cur.execute("CREATE TENSOR T AS SELECT A.i, A.j, A.v FROM A WHERE A.i <> 8")
    cur.execute("CREATE TENSOR S AS SELECT A.i, A.j, A.v * 3 AS v FROM A WHERE A.i % 2 = 0 AND A.i < 10")
    return cur, a


@pytest.mark.parametrize("kind", ["LEFT", "FULL"])
def test_outer_joins_of_column_batches_give_the_dict_joins_tuples(pairs, monkeypatch, kind, every_run_stacked):
    cur, t = pairs
    sql = f"SELECT T.i, T.j, S.i AS si, S.j AS sj, T.v, S.v AS w FROM T {kind} JOIN S ON T.i = S.i AND T.j = S.j"
    as_columns, as_tuples, probes = _as_tuples_too(cur, monkeypatch, sql)
    assert probes
    _same_rows(as_columns, as_tuples)
    keys = {(r[0], r[1], r[2], r[3]) for r in as_columns}
    assert (10, 0, None, None) in keys and (3, 1, None, None) in keys and (2, 1, 2, 1) in keys
    assert ((None, None, 8, 4) in keys) == (kind == "FULL")
    edge = next(r for r in as_columns if r[:2] == (10, 0))
    assert edge[5].shape == (2, 4) and not edge[5].any()  # the missing tile is shaped as its partner
    assert len(as_columns) == 10 * 5 + (5 if kind == "FULL" else 0)


def test_sparse_addition_by_a_full_join_of_column_batches(pairs, every_run_stacked):
    cur, a = pairs
    got = cur.execute("SELECT COALESCE(T.i, S.i) AS i, COALESCE(T.j, S.j) AS j, T.v + S.v AS v "
                      "FROM T FULL JOIN S ON T.i = S.i AND T.j = S.j").fetch_tensor()
    rows = np.arange(42) // 4
    expected = np.where((rows != 8)[:, None], a, 0) + np.where(((rows % 2 == 0) & (rows < 10))[:, None], 3 * a, 0)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize("kind", ["LEFT", "FULL", "INNER"])
def test_a_join_with_no_build_tuple_and_one_probe_tuple(pairs, monkeypatch, kind, every_run_stacked):
    cur, _ = pairs
    sql = (f"SELECT T.i, T.j, S.i AS si, T.v, S.v AS w FROM T {kind} JOIN (SELECT S.i, S.j, S.v FROM S WHERE S.i > 100) "
           "AS S ON T.i = S.i AND T.j = S.j")
    as_columns, as_tuples, _ = _as_tuples_too(cur, monkeypatch, sql)
    _same_rows(as_columns, as_tuples)
    assert len(as_columns) == (0 if kind == "INNER" else 10 * 5)
    one = (f"SELECT T.i, T.j, S.i AS si, T.v, S.v AS w FROM T {kind} JOIN S ON T.i = S.i AND T.j = S.j "
           "WHERE T.i = 4 AND T.j = 1")
    as_columns, as_tuples, _ = _as_tuples_too(cur, monkeypatch, one)
    _same_rows(as_columns, as_tuples)
    assert [r[:3] for r in as_columns] == [(4, 1, 4)]


def test_null_probe_keys_meet_nothing_and_null_build_keys_join_as_a_dict(pairs, monkeypatch, every_run_stacked):
    cur, _ = pairs
    cur.execute("CREATE TENSOR U AS SELECT T.i, T.j, T.v FROM T WHERE T.i < 6")
    inner = "(SELECT T.i AS a, T.j AS b, S.i AS c, S.j AS d, T.v + S.v AS v FROM T LEFT JOIN S ON T.i = S.i AND T.j = S.j)"
    for sql in (f"SELECT X.a, X.c, U.i, X.v, U.v AS w FROM {inner} AS X LEFT JOIN U ON X.c = U.i AND X.d = U.j",
                f"SELECT U.i, X.a, X.c, U.v, X.v AS w FROM U FULL JOIN {inner} AS X ON U.i = X.c AND U.j = X.d"):
        as_columns, as_tuples, _ = _as_tuples_too(cur, monkeypatch, sql)
        _same_rows(sorted(as_columns, key=repr), sorted(as_tuples, key=repr))
        assert any(None in r[:3] for r in as_columns)


def test_outer_joins_of_sparse_tiles_go_tuple_by_tuple_with_the_same_answers(cur):
    from scipy import sparse
    a = sparse.random(64, 64, density=0.02, format="csr", dtype=np.float32, random_state=3)
    dense = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    cur.execute("CREATE TENSOR A FROM ? TILE (8, 8)", [a])
    cur.execute("CREATE TENSOR D FROM ? TILE (8, 8)", [dense])
    got = cur.execute("SELECT D.i, D.j, D.v + A.v AS v FROM D LEFT JOIN A ON D.i = A.i AND D.j = A.j").fetch_tensor()
    np.testing.assert_allclose(got, dense + a.toarray())
    full = cur.execute("SELECT COALESCE(A.i, D.i) AS i, COALESCE(A.j, D.j) AS j, A.v * 2 + D.v AS v "
                       "FROM A FULL JOIN D ON A.i = D.i AND A.j = D.j").fetch_tensor()
    np.testing.assert_allclose(full, 2 * a.toarray() + dense)


def test_column_tables_hand_on_missing_tuples_as_masks_and_zeros():
    from trdb.execution.tile_math.column_join import build_table
    build = ColumnBatch([np.array([5, 3, 5], np.int64), np.arange(6, dtype=np.float32).reshape(3, 2)], (False, True))
    table = build_table([build], (0,))
    table.mark_matches()
    probe = ColumnBatch([np.ma.MaskedArray(np.array([5, 4, 9, 5], np.int64), [False, False, False, True])],
                        (False,))
    fill = [None, np.zeros(2, np.float32)]
    out = [row for part in table.probe(probe, (0,), fill) for row in part]
    assert [(r[0], r[1], r[2].tolist()) for r in out] == [
        (5, 5, [0.0, 1.0]), (5, 5, [4.0, 5.0]), (4, None, [0.0, 0.0]), (9, None, [0.0, 0.0]), (None, None, [0.0, 0.0])]
    rest = [row for part in table.unmatched([None]) for row in part]
    assert [(r[0], r[1], r[2].tolist()) for r in rest] == [(None, 3, [2.0, 3.0])]


def test_rekeys_and_coalesce_of_keys_project_column_batches(pairs, monkeypatch, every_run_stacked):
    from trdb.execution.tile_math import stacked_tiles
    projected, real = [], stacked_tiles.column_projection

    def watched(*args):
        function = real(*args)
        if function is None:
            return None

        def project(batch):
            out = function(batch)
            projected.append(out is not None)
            return out
        return project
    monkeypatch.setattr(stacked_tiles, "column_projection", watched)
    cur, _ = pairs
    sql = ("SELECT COALESCE(S.i, T.i) AS i, T.j * 2 + 1 AS j, S.i // 2 AS h, T.v + S.v AS v "
           "FROM T FULL JOIN S ON T.i = S.i AND T.j = S.j")
    as_columns, as_tuples, _ = _as_tuples_too(cur, monkeypatch, sql)
    _same_rows(as_columns, as_tuples)
    assert projected and all(projected)
    assert (8, None, 4) in {r[:3] for r in as_columns} and (3, 3, None) in {r[:3] for r in as_columns}


# ------------------------------------------------------------ ORDER BY

def _sorted_both_ways(cur, monkeypatch, sql: str) -> tuple[list, list, list]:
    """A query's rows sorted as columns, and as the tuple sort gives them; and each columnar sort's batch count."""
    from trdb.execution.operators import sort
    sorts, real = [], sort.sorted_batches

    def watched(batches, positions, descending):
        out = real(batches, positions, descending)
        sorts.append(None if out is None else len(batches))
        return out
    monkeypatch.setattr(sort, "sorted_batches", watched)
    as_columns = cur.execute(sql).fetchall()
    with monkeypatch.context() as patched:
        patched.setattr(sort, "sorted_batches", lambda *args: None)
        as_tuples = cur.execute(sql).fetchall()
    return as_columns, as_tuples, sorts


@pytest.mark.parametrize("order", ["si, T.j DESC", "si DESC, T.i", "T.j, si DESC, T.i DESC"])
def test_order_by_null_keys_as_the_tuple_sort(pairs, monkeypatch, order, every_run_stacked):
    cur, _ = pairs
    sql = (f"SELECT T.i, T.j, S.i AS si, T.v, S.v AS w FROM T FULL JOIN S ON T.i = S.i AND T.j = S.j "
           f"WHERE T.i < 10 OR S.i < 10 ORDER BY {order}")
    as_columns, as_tuples, sorts = _sorted_both_ways(cur, monkeypatch, sql)
    _same_rows(as_columns, as_tuples)
    assert sorts and all(s is not None for s in sorts)
    assert any(r[2] is None for r in as_columns) and any(r[0] is None for r in as_columns)


def test_order_by_over_edge_tiles_no_tuples_one_tuple_and_alternating_layouts(cur, monkeypatch, every_run_stacked):
    cur.execute("SET workers = 1")
    cur.execute("CREATE TENSOR A FROM ? TILE (4, 4)", [np.arange(66 * 66, dtype=np.float32).reshape(66, 66)])
    for where, count in (("A.i > 20", 0), ("A.i = 2 AND A.j = 3", 1), ("A.i < 20", 17 * 17)):
        sql = f"SELECT A.i, A.j, A.v FROM A WHERE {where} ORDER BY A.j DESC, A.i"
        as_columns, as_tuples, sorts = _sorted_both_ways(cur, monkeypatch, sql)
        _same_rows(as_columns, as_tuples)
        assert len(as_columns) == count and sorts[0] is not None
    assert {r[2].shape for r in as_columns} == {(4, 4), (2, 4), (4, 2), (2, 2)}  # edge tiles in runs of their own
    cur.execute("CREATE TENSOR B FROM ? TILE (4, 4)", [np.arange(66 * 6, dtype=np.float32).reshape(66, 6)])
    as_columns, as_tuples, sorts = _sorted_both_ways(cur, monkeypatch, "SELECT B.i, B.j, B.v FROM B ORDER BY B.i, B.j")
    _same_rows(as_columns, as_tuples)
    assert sorts == [None]  # full and edge tiles alternate: runs of one tuple would cost more than tuples


def test_order_by_past_memory_limit_merges_column_batches_as_tuples(cur, monkeypatch):
    cur.execute("SET workers = 1")
    a = np.random.default_rng(2).standard_normal((2048, 8)).astype(np.float32)
    cur.execute("CREATE TENSOR A FROM ? TILE (1, 8)", [a])
    expected = cur.execute("SELECT A.i, A.j, A.v FROM A ORDER BY A.i DESC").fetchall()
    cur.execute("SET memory_limit = '64KB'")
    got = cur.execute("SELECT A.i, A.j, A.v FROM A ORDER BY A.i DESC").fetchall()
    _same_rows(got, expected)
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
        rows = [row for b in batches for row in b]
        for position, down in reversed(list(zip((0, 1), descending))):
            rows.sort(key=lambda r: (r[position] is None, r[position] if r[position] is not None else 0), reverse=down)
        got = [row for part in sorted_batches(batches, (0, 1), descending) for row in part]
        assert [(r[0], r[1], float(r[2])) for r in got] == [(r[0], r[1], float(r[2])) for r in rows]


# ------------------------------------------------------------ residual join conditions

@pytest.mark.parametrize("on", ["T.i = S.i AND T.j >= S.j", "T.i = S.i AND T.j + S.j <> 4 AND NOT S.j = 1",
                                "T.j = S.j AND T.i < S.i"], ids=["unique", "unique-and-not", "many"])
def test_residual_conditions_on_keys_as_the_dict_join(pairs, monkeypatch, on, every_run_stacked):
    """(LEFT and FULL joins take key equalities only: their residual path is tested on kept_pairs below.)"""
    cur, _ = pairs
    sql = f"SELECT T.i, T.j, S.i AS si, S.j AS sj, T.v, S.v AS w FROM T JOIN S ON {on}"
    as_columns, as_tuples, probes = _as_tuples_too(cur, monkeypatch, sql)
    assert probes and as_columns
    _same_rows(as_columns, as_tuples)


def test_a_residual_condition_the_arrays_cannot_answer_raises_as_the_dict_join(pairs, every_run_stacked):
    cur, _ = pairs
    with pytest.raises(trdb.DataError, match="division by zero"):
        cur.execute("SELECT T.i, S.j, T.v FROM T JOIN S ON T.i = S.i AND T.j // (S.j - S.j) = 0").fetchall()


def test_kept_pairs_hand_on_a_missing_pair_where_the_condition_drops_all():
    from trdb.execution.tile_math.join_residual import Residual, kept_pairs
    probe = ColumnBatch([np.array([1, 2, 3], np.int64)], (False,))
    build = [np.array([10, 20, 30], np.int64)]
    residual = Residual(lambda batch: batch.columns[1] > 15, lambda row: row[1] > 15)
    probe_rows, build_rows = np.array([0, 0, 1, 2, 2]), np.array([0, 1, -1, 0, 2])
    got = kept_pairs(probe, build, (False,), probe_rows, build_rows, residual, outer=True)
    assert [a.tolist() for a in got] == [[0, 1, 2], [1, -1, 2]]
    inner = kept_pairs(probe, build, (False,), np.array([0, 2]), np.array([0, 0]), residual, outer=True)
    assert [a.tolist() for a in inner] == [[0, 2], [-1, -1]]
    assert [a.tolist() for a in kept_pairs(probe, build, (False,), np.array([0, 2]), np.array([0, 2]), residual,
                                           outer=False)] == [[2], [2]]


# ------------------------------------------------------------ filters

@pytest.mark.parametrize("where", ["S.i IS NULL", "NOT T.i = S.i", "T.i IN (1, 3, 10) OR S.j >= 3",
                                   "COALESCE(S.i, T.i + 100) > 8", "T.i > 100"])
def test_filters_on_keys_keep_column_batches_as_the_tuple_test(pairs, monkeypatch, where, every_run_stacked):
    from trdb.execution.operators import filter as filter_module
    kept, real = [], filter_module.predicate_function

    def watched(expr):
        function = real(expr)
        return None if function is None else (lambda batch: kept.append(len(batch)) or function(batch))
    monkeypatch.setattr(filter_module, "predicate_function", watched)
    cur, _ = pairs
    sql = f"SELECT T.i, T.j, S.i AS si, T.v, S.v AS w FROM T FULL JOIN S ON T.i = S.i AND T.j = S.j WHERE {where}"
    as_columns = cur.execute(sql).fetchall()
    assert kept
    monkeypatch.setattr(filter_module, "predicate_function", lambda expr: None)
    _same_rows(as_columns, cur.execute(sql).fetchall())
