"""Operators over column batches: the logic files and random queries with every run of tiles read as column batches;
MIN / MAX by group against numpy (edge tiles, NaN, no tuples, one-tuple groups); key expressions and filters on key
arrays (and on tile values, one a tuple) against the tuple closures (NULL keys). Joins: test_column_joins.py; ORDER BY:
test_column_sort.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import trdb
from helpers.column_paths import same_rows
from helpers.logic_runner import logic_files, run_file
from test_random_queries import REGRESSION_SEEDS, SEEDS, check_seed
from trdb.execution.column_batch import ColumnBatch

SQL_ROOT = Path(__file__).parent.parent / "sql"


@pytest.mark.parametrize("seed", SEEDS + list(REGRESSION_SEEDS), ids=lambda s: f"seed{s:03d}")
def test_random_queries_over_column_batches(seed, every_run_stacked):
    check_seed(seed)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("path", logic_files(SQL_ROOT), ids=lambda p: str(p.relative_to(SQL_ROOT)))
def test_logic_files_over_column_batches(path, workers, every_run_stacked):
    run_file(path, setup=(f"SET workers = {workers}",))


# ------------------------------------------------------------ MIN and MAX by group

def _seen_by_groups(monkeypatch) -> list:
    """The batches the aggregates' arrays took (tile_math/column_groups.py)."""
    from trdb.execution.tile_math import column_groups
    seen, real = [], column_groups.ColumnGroups.add

    def add(self, keys, values, counts=None):
        seen.append(len(keys))
        return real(self, keys, values, counts)
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



@pytest.mark.parametrize("repeats", ["none", "some", "all"])
def test_sums_added_to_a_box_row_by_row_match_numpy(repeats):
    """Batches added to a box as they come (GroupBox.add_rows): keys met once go to their places at once, the
    repeated ones one after another; sums and counts over two key columns as numpy's np.add.at gives them."""
    from trdb.execution.tile_math.column_groups import ColumnGroups
    rng = np.random.default_rng(9)
    groups = ColumnGroups(["SUM", "COUNT", "MAX"])
    sums, counts, maxima = np.zeros((30, 4, 2, 3)), np.zeros((30, 4), np.int64), np.full((30, 4, 2, 3), -np.inf)
    for batch in range(8):
        if repeats == "all":
            keys = np.repeat(rng.integers(0, 30, (5, 2)), 12, axis=0) % [30, 4]
        elif repeats == "none":
            keys = np.stack(np.unravel_index(rng.permutation(120)[:60], (30, 4)), axis=1)
        else:
            keys = np.stack([rng.integers(0, 30, 60), rng.integers(0, 4, 60)], axis=1)
        keys = np.vstack([[[0, 0], [29, 3]], keys]) if batch == 0 else keys  # the box's corners first
        values = rng.standard_normal((len(keys), 2, 3))
        groups.add(keys.astype(np.int64), [values, None, values])
        np.add.at(sums, (keys[:, 0], keys[:, 1]), values)
        np.add.at(counts, (keys[:, 0], keys[:, 1]), 1)
        np.maximum.at(maxima, (keys[:, 0], keys[:, 1]), values)
    assert groups.box is not None
    keys, got_counts, (got_sums, _, got_max) = groups.groups()
    present = np.argwhere(counts > 0)
    np.testing.assert_array_equal(keys, present)
    np.testing.assert_array_equal(got_counts, counts[present[:, 0], present[:, 1]])
    np.testing.assert_allclose(got_sums, sums[present[:, 0], present[:, 1]], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(got_max, maxima[present[:, 0], present[:, 1]])

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

# ------------------------------------------------------------ filters

@pytest.mark.parametrize("where", ["S.i IS NULL", "NOT T.i = S.i", "T.i IN (1, 3, 10) OR S.j >= 3",
                                   "COALESCE(S.i, T.i + 100) > 8", "T.i > 100", "SUMSQ(T.v) > 20",
                                   "REDUCE_MAX(S.v) > 1 OR T.i < 2", "NOT SUMSQ(T.v - S.v) < 40 AND T.i IS NOT NULL",
                                   "SUMSQ(T.v) BETWEEN 10 AND 30", "REDUCE_SUM(T.v) IN (0.0) OR REDUCE_MEAN(S.v) <= 0"])
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
    same_rows(as_columns, cur.execute(sql).fetchall())
