"""Outer joins (NULL keys as masks, zero tiles) and residual join conditions over column batches, against the dict
join's tuples: edge tiles, NULL probe and build keys, no build tuple, one tuple, CSR tiles."""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from helpers.column_paths import as_tuples_too, same_rows
from trdb.execution.column_batch import ColumnBatch


@pytest.mark.parametrize("kind", ["LEFT", "FULL"])
def test_outer_joins_of_column_batches_give_the_dict_joins_tuples(pairs, monkeypatch, kind, every_run_stacked):
    cur, t = pairs
    sql = f"SELECT T.i, T.j, S.i AS si, S.j AS sj, T.v, S.v AS w FROM T {kind} JOIN S ON T.i = S.i AND T.j = S.j"
    as_columns, as_tuples, probes = as_tuples_too(cur, monkeypatch, sql)
    assert probes
    same_rows(as_columns, as_tuples)
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
    as_columns, as_tuples, _ = as_tuples_too(cur, monkeypatch, sql)
    same_rows(as_columns, as_tuples)
    assert len(as_columns) == (0 if kind == "INNER" else 10 * 5)
    one = (f"SELECT T.i, T.j, S.i AS si, T.v, S.v AS w FROM T {kind} JOIN S ON T.i = S.i AND T.j = S.j "
           "WHERE T.i = 4 AND T.j = 1")
    as_columns, as_tuples, _ = as_tuples_too(cur, monkeypatch, one)
    same_rows(as_columns, as_tuples)
    assert [r[:3] for r in as_columns] == [(4, 1, 4)]



@pytest.mark.parametrize("kind", ["INNER", "LEFT", "FULL"])
@pytest.mark.parametrize("one", ["S.i = 2 AND S.j = 1", "S.i = 8 AND S.j = 4"], ids=["met", "met-by-none"])
def test_a_build_side_of_one_tuple_joins_as_the_dict_join(pairs, monkeypatch, kind, one, every_run_stacked):
    """A one-tuple build side (a tensor of one tile) compares its key with the probe tuples' instead of sorting:
    inner, outer and with a residual condition, the tuple met by one probe tuple or by none."""
    cur, _ = pairs
    for on in ("T.i = S.i AND T.j = S.j", "T.i = S.i AND T.j >= S.j"):
        if kind != "INNER" and ">=" in on:
            continue  # outer joins take key equalities only
        sql = (f"SELECT T.i, T.j, S.i AS si, S.j AS sj, T.v, S.v AS w FROM T {kind} JOIN "
               f"(SELECT S.i, S.j, S.v FROM S WHERE {one}) AS S ON {on}")
        as_columns, as_tuples, probes = as_tuples_too(cur, monkeypatch, sql)
        assert probes
        same_rows(as_columns, as_tuples)
        met = [r for r in as_columns if r[2] is not None and r[0] is not None]
        assert len(met) == (0 if "8" in one else 4 if ">=" in on else 1)  # row 2's tiles j >= 1, or (2, 1)


def test_a_one_tuple_table_meets_equal_keys_and_never_null_ones():
    from trdb.execution.tile_math.column_join import build_table
    build = ColumnBatch([np.array([5], np.int64), np.array([7], np.int64), np.ones((1, 2), np.float32)],
                        (False, False, True))
    table = build_table([build], (0, 1))
    assert table.single == (5, 7)
    table.mark_matches()
    keys = np.ma.MaskedArray(np.array([5, 5, 4, 5], np.int64), [False, False, False, True])
    probe = ColumnBatch([keys, np.array([7, 6, 7, 7], np.int64)], (False, False))
    fill = [None, None, np.zeros(2, np.float32)]
    out = [(r[0], r[1], r[2]) for part in table.probe(probe, (0, 1), fill) for r in part]
    assert out == [(5, 7, 5), (5, 6, None), (4, 7, None), (None, 7, None)]
    assert [(r[0], r[1]) for part in table.probe(probe, (0, 1)) for r in part] == [(5, 7)]
    assert not list(table.unmatched([None, None]))  # met once: nothing left for a FULL join
    none_met = build_table([build], (0, 1))
    none_met.mark_matches()
    assert not list(none_met.probe(ColumnBatch([np.array([1], np.int64), np.array([7], np.int64)], (False, False)),
                                   (0, 1)))
    assert [(r[0], r[1], r[2]) for part in none_met.unmatched([None, None]) for r in part] == [(None, None, 5)]

def test_null_probe_keys_meet_nothing_and_null_build_keys_join_as_a_dict(pairs, monkeypatch, every_run_stacked):
    cur, _ = pairs
    cur.execute("CREATE TENSOR U AS SELECT T.i, T.j, T.v FROM T WHERE T.i < 6")
    inner = "(SELECT T.i AS a, T.j AS b, S.i AS c, S.j AS d, T.v + S.v AS v FROM T LEFT JOIN S ON T.i = S.i AND T.j = S.j)"
    for sql in (f"SELECT X.a, X.c, U.i, X.v, U.v AS w FROM {inner} AS X LEFT JOIN U ON X.c = U.i AND X.d = U.j",
                f"SELECT U.i, X.a, X.c, U.v, X.v AS w FROM U FULL JOIN {inner} AS X ON U.i = X.c AND U.j = X.d"):
        as_columns, as_tuples, _ = as_tuples_too(cur, monkeypatch, sql)
        same_rows(sorted(as_columns, key=repr), sorted(as_tuples, key=repr))
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
    as_columns, as_tuples, _ = as_tuples_too(cur, monkeypatch, sql)
    same_rows(as_columns, as_tuples)
    assert projected and all(projected)
    assert (8, None, 4) in {r[:3] for r in as_columns} and (3, 3, None) in {r[:3] for r in as_columns}

# ------------------------------------------------------------ residual join conditions

@pytest.mark.parametrize("on", ["T.i = S.i AND T.j >= S.j", "T.i = S.i AND T.j + S.j <> 4 AND NOT S.j = 1",
                                "T.j = S.j AND T.i < S.i"], ids=["unique", "unique-and-not", "many"])
def test_residual_conditions_on_keys_as_the_dict_join(pairs, monkeypatch, on, every_run_stacked):
    """(LEFT and FULL joins take key equalities only: their residual path is tested on kept_pairs below.)"""
    cur, _ = pairs
    sql = f"SELECT T.i, T.j, S.i AS si, S.j AS sj, T.v, S.v AS w FROM T JOIN S ON {on}"
    as_columns, as_tuples, probes = as_tuples_too(cur, monkeypatch, sql)
    assert probes and as_columns
    same_rows(as_columns, as_tuples)


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


def test_a_join_of_single_big_tiles_hands_them_on_uncopied():
    from trdb.execution.tile_math.column_join import build_table
    tiles = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    tiles.flags.writeable = False
    build = ColumnBatch([np.array([0, 1], np.int64), tiles], (False, True))
    table = build_table([build], (0,))
    assert table.columns[1] is tiles  # one build batch: its columns as they are
    probe_tiles = np.ones((2, 3, 3), np.float32)
    probe = ColumnBatch([np.array([0, 1], np.int64), probe_tiles], (False, True))
    (part,) = table.probe(probe, (0,))
    assert np.shares_memory(part.columns[3], tiles) and not part.columns[3].flags.writeable
    np.testing.assert_array_equal(part.columns[3], tiles)
    probe = ColumnBatch([np.array([1, 7, 0], np.int64), np.ones((3, 3, 3), np.float32)], (False, True))
    (part,) = table.probe(probe, (0,))  # met out of order: gathered
    assert part.columns[0].tolist() == [1, 0] and part.columns[2].tolist() == [1, 0]
    np.testing.assert_array_equal(part.columns[3], tiles[[1, 0]])
