"""Column batches: the tuple view operators see, and queries over stored runs of small tiles against numpy."""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from trdb.execution.column_batch import ColumnBatch, is_columns
from trdb.execution.operators import tensor_scan
from trdb.storage.tile_runs import MIN_RUN, TileRuns, as_tile_runs


def _batch(n: int, tile=(2, 3)) -> ColumnBatch:
    stack = np.arange(n * int(np.prod(tile)), dtype=np.float32).reshape(n, *tile)
    return ColumnBatch([np.arange(n, dtype=np.int64), np.arange(n, dtype=np.int64) * 10, stack],
                       (False, False, True))


def test_a_column_batch_reads_as_the_tuples_a_list_batch_holds():
    batch = _batch(5)
    rows = list(batch)
    assert len(batch) == 5 and len(rows) == 5
    assert rows[3][:2] == (3, 30) and type(rows[3][0]) is int
    np.testing.assert_array_equal(rows[3][2], batch.columns[2][3])
    assert batch[4] == rows[4]
    part = batch[1:3]
    assert is_columns(part) and [r[0] for r in part] == [1, 2]
    assert batch.nbytes == 5 * 6 * 4 + 2 * 5 * 8


@pytest.mark.parametrize("n", [0, 1])
def test_empty_and_one_tuple_batches(n):
    batch = _batch(n)
    assert len(batch) == n and list(batch) == batch.rows() and bool(batch) == (n > 0)


def test_zero_d_tiles_come_as_zero_d_arrays():
    batch = ColumnBatch([np.arange(3, dtype=np.int64), np.array([1.5, 2.5, 3.5])], (False, True))
    value = batch[1][1]
    assert type(value) is np.ndarray and value.ndim == 0 and float(value) == 2.5


def test_tile_runs_split_at_shapes_and_short_runs():
    tiles = [np.ones((2, 2))] * (MIN_RUN + 2) + [np.ones((2, 1))] * 3 + [np.zeros((2, 2))] * MIN_RUN
    runs = as_tile_runs(tiles)
    assert [(start, len(stack)) for start, stack in runs.runs] == [(0, MIN_RUN + 2), (MIN_RUN + 5, MIN_RUN)]
    assert [(a, b, s is not None) for a, b, s in runs.pieces()] == [
        (0, MIN_RUN + 2, True), (MIN_RUN + 2, MIN_RUN + 5, False), (MIN_RUN + 5, 2 * MIN_RUN + 5, True)]
    assert all(np.array_equal(a, b) for a, b in zip(runs, tiles)) and not runs.runs[0][1].flags.writeable
    assert isinstance(runs, TileRuns) and isinstance(runs, list)


@pytest.fixture
def ragged(cur):
    """A tensor whose tiles come in runs of one shape with ragged edge tiles between (and a run too short)."""
    a = np.random.default_rng(3).standard_normal((203, 129)).astype(np.float32)
    cur.execute("CREATE TENSOR R FROM ? TILE (4, 4)", [a])
    return cur, a


def _column_batches_seen(monkeypatch) -> list:
    seen = []
    real = tensor_scan.TensorScanExec._column_batches

    def watched(self, keys, pieces, tiles):
        for batch in real(self, keys, pieces, tiles):
            seen.append(is_columns(batch))
            yield batch
    monkeypatch.setattr(tensor_scan.TensorScanExec, "_column_batches", watched)
    return seen


def _tiles_of(a: np.ndarray, t: int = 4) -> dict:
    return {(i, j): a[i * t:(i + 1) * t, j * t:(j + 1) * t] for i in range(-(-a.shape[0] // t))
            for j in range(-(-a.shape[1] // t))}


def test_queries_over_runs_and_edges_match_numpy(ragged, monkeypatch):
    cur, a = ragged
    seen = _column_batches_seen(monkeypatch)
    total = cur.execute("SELECT SUM(SUMSQ(R.v * 2 + 1)) AS v FROM R").fetchone()[0]
    assert True in seen and False in seen  # runs as column batches, edges as list batches
    np.testing.assert_allclose(float(total), float(((a.astype(np.float64) * 2 + 1) ** 2).sum()), rtol=1e-5)
    rows = cur.execute("SELECT R.i AS i, SUM(SUMSQ(R.v)) AS v FROM R GROUP BY R.i").fetchall()
    expected = {}
    for (i, _j), tile in _tiles_of(a).items():
        expected[i] = expected.get(i, 0.0) + float((tile.astype(np.float64) ** 2).sum())
    assert {i: pytest.approx(float(v), rel=1e-5) for i, v in rows} == expected
    got = cur.execute("SELECT R.i AS i, R.j AS j, RELU(R.v) * 3 AS v FROM R").fetch_tensor()
    np.testing.assert_allclose(got, np.maximum(a, 0) * 3, rtol=1e-6)


def test_update_and_create_as_over_runs_match_numpy(ragged):
    cur, a = ragged
    cur.execute("UPDATE R SET v = v * 0.5 + 1")
    expected = a * np.float32(0.5) + np.float32(1)
    np.testing.assert_allclose(cur.execute("SELECT * FROM R").fetch_tensor(), expected, rtol=1e-6)
    cur.execute("UPDATE R SET v = v - 1 WHERE R.i < 10")
    expected[:40] -= 1
    np.testing.assert_allclose(cur.execute("SELECT * FROM R").fetch_tensor(), expected, rtol=1e-6)
    cur.execute("CREATE TENSOR C AS SELECT R.i AS i, R.j AS j, R.v * R.v AS v FROM R")
    np.testing.assert_allclose(cur.execute("SELECT * FROM C").fetch_tensor(), expected * expected, rtol=1e-6)
    assert cur.execute("SELECT COUNT(*) AS n FROM C").fetchone()[0] == len(_tiles_of(a))


def test_joins_limits_and_sorts_read_column_batches_as_tuples(ragged):
    cur, a = ragged
    cur.execute("CREATE TENSOR B FROM ? TILE (4, 4)", [a.T.copy()])
    got = cur.execute("SELECT A.i AS i, B.j AS j, SUM(A.v @ B.v) AS v FROM R AS A JOIN B ON A.j = B.i "
                      "GROUP BY A.i, B.j").fetch_tensor()
    np.testing.assert_allclose(got, a.astype(np.float64) @ a.T, rtol=1e-4, atol=1e-3)
    rows = cur.execute("SELECT R.i AS i, R.j AS j, R.v AS v FROM R ORDER BY i DESC, j LIMIT 3").fetchall()
    assert [(i, j) for i, j, _ in rows] == [(50, 0), (50, 1), (50, 2)]
    np.testing.assert_array_equal(rows[1][2], a[200:203, 4:8])


def test_a_stacked_sum_that_fails_gives_the_error_a_tuple_gives(cur):
    cur.execute("CREATE TENSOR I FROM ? TILE (2, 2) DTYPE int32", [np.ones((64, 64), np.int32)])
    assert int(cur.execute("SELECT SUM(SUMSQ(I.v)) AS v FROM I").fetchone()[0]) == 64 * 64


# ------------------------------------------------------------ joins of column batches

def test_column_table_probes_many_to_many_and_keys_outside_the_box():
    from trdb.execution.tile_math.column_join import build_table
    build = ColumnBatch([np.array([5, 3, 5, 9], np.int64), np.array([1, 1, 2, 1], np.int64),
                         np.arange(4 * 2, dtype=np.float32).reshape(4, 2)], (False, False, True))
    table = build_table([build[:2], build[2:]], (0, 1))
    probe = ColumnBatch([np.array([5, 5, 4, 100, -3, 9], np.int64), np.array([1, 2, 1, 1, 1, 1], np.int64)],
                        (False, False))
    out = [row for part in table.probe(probe, (0, 1)) for row in part]
    got = sorted((row[0], row[1], row[2], row[3], tuple(row[4].tolist())) for row in out)
    assert got == [(5, 1, 5, 1, (0.0, 1.0)), (5, 2, 5, 2, (4.0, 5.0)), (9, 1, 9, 1, (6.0, 7.0))]


def test_a_cross_join_of_column_batches_pairs_every_tuple():
    from trdb.execution.tile_math.column_join import build_table
    build = ColumnBatch([np.arange(3, dtype=np.int64)], (False,))
    probe = ColumnBatch([np.arange(10, 12, dtype=np.int64)], (False,))
    out = [row for part in build_table([build], ()).probe(probe, ()) for row in part]
    assert sorted(out) == [(a, b) for a in (10, 11) for b in range(3)]


@pytest.fixture
def embeddings(cur):
    rng = np.random.default_rng(5)
    entities, relations = rng.standard_normal((300, 8)).astype(np.float32), rng.standard_normal((7, 8)).astype(np.float32)
    h, r, t = rng.integers(0, 300, 2000), rng.integers(0, 7, 2000), rng.integers(0, 300, 2000)
    cur.execute("CREATE TENSOR E FROM ? TILE (1, 8)", [entities])
    cur.execute("CREATE TENSOR R FROM ? TILE (1, 8)", [relations])
    cur.execute("CREATE TABLE triples (h BIGINT, r BIGINT, t BIGINT)")
    cur.execute("INSERT INTO triples VALUES " + ", ".join(f"({a}, {b}, {c})" for a, b, c in zip(h, r, t)))
    return cur, entities, relations, (h, r, t)


def test_a_transe_loss_over_an_ordinary_table_of_triples_matches_numpy(embeddings, monkeypatch):
    cur, entities, relations, (h, r, t) = embeddings
    probes = []
    from trdb.execution.tile_math import column_join
    real = column_join.ColumnTable.probe

    def watched(self, batch, keys, *fill):
        probes.append(len(batch))
        yield from real(self, batch, keys, *fill)
    monkeypatch.setattr(column_join.ColumnTable, "probe", watched)
    got = cur.execute("SELECT SUM(SUMSQ(H.v + Q.v - U.v)) AS v FROM triples AS X JOIN E AS H ON H.i = X.h "
                      "JOIN R AS Q ON Q.i = X.r JOIN E AS U ON U.i = X.t").fetchone()[0]
    expected = ((entities[h].astype(np.float64) + relations[r] - entities[t]) ** 2).sum()
    assert probes and float(got) == pytest.approx(expected, rel=1e-5)
    per_head = cur.execute("SELECT X.h AS i, SUM(SUMSQ(H.v - U.v)) AS v FROM triples AS X JOIN E AS H ON H.i = X.h "
                           "JOIN E AS U ON U.i = X.t GROUP BY X.h").fetchall()
    expected_per_head: dict = {}
    for a, c in zip(h.tolist(), t.tolist()):
        difference = entities[a].astype(np.float64) - entities[c]
        expected_per_head[a] = expected_per_head.get(a, 0.0) + float((difference ** 2).sum())
    assert {i: pytest.approx(float(v), rel=1e-5) for i, v in per_head} == expected_per_head


def test_a_table_with_nulls_or_non_integers_is_read_as_tuples(embeddings):
    cur, entities, _, _ = embeddings
    cur.execute("CREATE TABLE picks (h BIGINT, w DOUBLE)")
    cur.execute("INSERT INTO picks VALUES (1, 0.5), (NULL, 1.0), (2, 2.0)")
    rows = cur.execute("SELECT X.h AS i, H.v AS v FROM picks AS X JOIN E AS H ON H.i = X.h").fetchall()
    assert sorted(i for i, _ in rows) == [1, 2]
    np.testing.assert_array_equal(dict(rows)[2], entities[2:3])


# ------------------------------------------------------------ groups as arrays

def test_column_groups_sum_avg_and_count_by_key_match_numpy(cur, monkeypatch):
    from trdb.execution.tile_math import column_groups
    monkeypatch.setattr(column_groups, "COMPACT_ROWS", 8)  # merge parts often
    rng = np.random.default_rng(9)
    a = rng.standard_normal((400, 6)).astype(np.float32)
    cur.execute("CREATE TENSOR A FROM ? TILE (2, 3)", [a])  # keys i in 0..199, j in 0..1
    rows = cur.execute("SELECT A.j AS j, SUM(A.v * 2) AS s, AVG(A.v) AS m, COUNT(*) AS n FROM A GROUP BY A.j").fetchall()
    tiles = a.reshape(200, 2, 2, 3).transpose(0, 2, 1, 3)  # [i, j] -> the 2 x 3 tile
    for j, s, m, n in rows:
        np.testing.assert_allclose(s, (tiles[:, j].astype(np.float64) * 2).sum(axis=0), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(m, tiles[:, j].astype(np.float64).mean(axis=0), rtol=1e-4, atol=1e-5)
        assert n == 200
    assert sorted(r[0] for r in rows) == [0, 1]


def test_an_aggregate_goes_on_as_a_dict_when_a_batch_of_tuples_comes(cur, monkeypatch):
    from trdb.execution.operators import hash_aggregate
    real = hash_aggregate.HashAggregateExec._columns_to_groups
    moved = []

    def watched(self, groups, completed):
        moved.append(self._columns.rows if self._columns is not None else 0)
        return real(self, groups, completed)
    monkeypatch.setattr(hash_aggregate.HashAggregateExec, "_columns_to_groups", watched)
    a = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    cur.execute("CREATE TENSOR A FROM ? TILE (1, 8)", [a])
    cur.execute("CREATE TENSOR B FROM ? TILE (1, 8)", [a[:5] + 1])  # few tiles: a list batch
    # a join with a residual condition the key arrays cannot evaluate (a float) goes tuple by tuple: list batches
    rows = cur.execute("SELECT U.i AS i, SUM(U.v) AS v FROM (SELECT A.i, A.j, A.v FROM A UNION ALL "
                       "SELECT A.i, A.j, A.v FROM A JOIN B ON A.i = B.i AND A.j + B.j >= 0.5 - 0.5) AS U "
                       "GROUP BY U.i").fetchall()
    got = np.concatenate([v for _, v in sorted(rows, key=lambda row: row[0])])
    expected = a.copy()
    expected[:5] += a[:5]
    np.testing.assert_allclose(got, expected)
    assert moved  # the arrays went into the dict when the list batches came


def test_groups_of_tiles_of_another_shape_go_on_as_a_dict(cur):
    """A fuzz finding: a column batch of tiles of another shape (a row of edge tiles) met the arrays
    (InternalError in np.concatenate). The groups go on as a dict: each group keeps its own tile shape, and
    one group given two shapes is the error the tuple-by-tuple addition reports."""
    a = np.arange(28 * 160, dtype=np.float32).reshape(28, 160)  # 3 rows of 20 tiles of 8 x 8, then 20 of 4 x 8
    cur.execute("CREATE TENSOR A FROM ? TILE (8, 8)", [a])
    rows = dict(cur.execute("SELECT A.i AS i, SUM(A.v) AS v FROM A GROUP BY A.i").fetchall())
    for i in range(4):
        np.testing.assert_array_equal(rows[i], a[i * 8:(i + 1) * 8].reshape(-1, 20, 8).sum(axis=1))
    with pytest.raises(trdb.DataError, match="tiles of one group have shapes"):
        cur.execute("SELECT A.j AS j, SUM(A.v) AS v FROM A GROUP BY A.j").fetchall()


def test_a_column_join_of_keys_far_apart_matches_a_dict_join():
    """Keys near both ends of int64 leave no box to number: the join goes tuple by tuple; keys that fit are
    compared without arithmetic that could wrap around."""
    from trdb.execution.tile_math.column_join import build_table
    wide = ColumnBatch([np.array([-2 ** 63, 2 ** 63 - 1], np.int64)], (False,))
    assert build_table([wide], (0,)) is None
    narrow = build_table([ColumnBatch([np.array([-5, 7], np.int64)], (False,))], (0,))
    probe = ColumnBatch([np.array([2 ** 63 - 1, -2 ** 63, 7], np.int64)], (False,))
    assert [row for part in narrow.probe(probe, (0,)) for row in part] == [(7, 7)]


@pytest.mark.parametrize("groups", [1, 3, 200, 5000], ids=["one", "few-long", "mixed", "mostly-single"])
@pytest.mark.parametrize("tile", [(), (1, 4), (2, 3)], ids=["0-d", "row", "block"])
def test_segment_sums_add_each_group_in_order_as_reduceat_does(groups, tile):
    from trdb.execution.tile_math.column_groups import _segment_sums
    rng = np.random.default_rng(groups)
    values = rng.standard_normal((6000, *tile))
    order = np.argsort(rng.integers(0, groups, 6000), kind="stable")
    keys = rng.integers(0, groups, 6000)[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    expected = np.add.reduceat(values[order], starts, axis=0)
    for positions in (order, None):
        taken = values[order] if positions is None else values
        assert np.allclose(_segment_sums(taken, positions, starts), expected, rtol=1e-12, atol=1e-12)


def test_a_spool_counts_distinct_keys_of_column_and_list_batches():
    from trdb.execution.spool import RowSpool
    from trdb.storage.memory import MemoryManager
    spool = RowSpool(MemoryManager(1 << 30).reservation("test"), lambda: None)  # nothing spills
    spool.append_batch(ColumnBatch([np.array([1, 2, 2, 5]), np.array([0, 0, 1, 1]), np.zeros((4, 2))],
                                   [False, False, True]))
    spool.append_batch([(5, None, np.zeros(2)), (7, 1, np.zeros(2))])
    assert spool.distinct_keys([0, 1]) == [4, 3]  # {1, 2, 5, 7}; {0, 1, NULL}


@pytest.mark.parametrize("arrival", ["random", "ascending", "far-apart", "two-columns"])
def test_column_groups_in_a_box_or_in_parts_sum_as_a_dict_does(arrival, monkeypatch):
    from trdb.execution.tile_math import column_groups
    monkeypatch.setattr(column_groups, "COMPACT_ROWS", 64)  # parts merge often
    rng = np.random.default_rng(11)
    batches = []
    for b in range(40):
        n = 300
        if arrival == "random":
            keys = rng.integers(0, 2000, (n, 1))
        elif arrival == "ascending":  # each batch past the box the last one made: the box is made again
            keys = np.sort(rng.integers(b * 250, b * 250 + 400, (n, 1)), axis=0)
        elif arrival == "far-apart":  # a key far outside any box: parts
            keys = rng.integers(0, 2000, (n, 1))
            keys[0, 0] = 10 ** 15 if b == 20 else keys[0, 0]
        else:
            keys = np.stack([rng.integers(0, 40, n), rng.integers(-5, 5, n)], axis=1)
        batches.append((keys.astype(np.int64), rng.standard_normal((n, 2, 3))))
    groups = column_groups.ColumnGroups(["SUM", "COUNT"])
    expected: dict = {}
    boxed = False
    for keys, values in batches:
        groups.add(keys, [values, None])
        boxed |= groups.box is not None
        for key, value in zip(map(tuple, keys.tolist()), values):
            count, total = expected.get(key, (0, 0))
            expected[key] = (count + 1, total + value)
    assert boxed  # each made a box at some point; the far key sends its groups back into parts
    assert (groups.box is None) == (arrival == "far-apart")
    keys, counts, (sums, _) = groups.groups()
    assert [tuple(k) for k in keys.tolist()] == sorted(expected)  # key order
    assert counts.tolist() == [expected[tuple(k)][0] for k in keys.tolist()]
    np.testing.assert_allclose(sums, np.stack([expected[tuple(k)][1] for k in keys.tolist()]), rtol=1e-12,
                               atol=1e-12)


def test_a_group_whose_sum_is_zero_is_a_group_in_the_box():
    from trdb.execution.tile_math.column_groups import ColumnGroups
    groups = ColumnGroups(["SUM"])
    keys = np.array([[0], [2], [2], [3]], dtype=np.int64)
    groups.add(keys, [np.array([1.0, 5.0, -5.0, 0.0])])
    assert groups.box is not None
    out_keys, counts, (sums,) = groups.groups()
    assert out_keys.ravel().tolist() == [0, 2, 3] and counts.tolist() == [1, 2, 1]
    assert sums.tolist() == [1.0, 0.0, 0.0]


@pytest.mark.parametrize("rows", [40, 100], ids=["full-tiles", "edge-tiles"])
def test_fetch_tensor_places_column_batches_as_tuples_would(rows, monkeypatch):
    from trdb.execution import result
    rng = np.random.default_rng(2)
    a = rng.standard_normal((rows, 8)).astype(np.float32)
    con = trdb.connect(workers=1)
    con.execute(f"CREATE TENSOR A FROM ? TILE ({1 if rows == 40 else 3}, 8)", [a])
    placed = []
    original = result.placed_columns
    monkeypatch.setattr(result, "placed_columns", lambda *args: placed.append(original(*args)) or placed[-1])
    np.testing.assert_array_equal(con.execute("SELECT * FROM A").fetch_tensor(), a)
    some = con.execute("SELECT A.i, A.j, A.v * 2 AS v FROM A WHERE A.i >= 4").fetch_tensor((rows + 6, 16))
    expected = np.zeros((rows + 6, 16), np.float32)
    first = 4 * (1 if rows == 40 else 3)
    expected[first:rows, :8] = 2 * a[first:]
    np.testing.assert_array_equal(some, expected)
    assert bool(placed and placed[0] is not None) == (rows == 40)  # edge tiles: tuple by tuple
    with pytest.raises(trdb.DataError, match="tuples under key"):
        con.execute("SELECT A.i, A.j, A.v FROM A UNION ALL SELECT A.i, A.j, A.v FROM A").fetch_tensor()
    con.close()


def test_a_large_spool_estimates_distinct_keys_from_a_sample():
    from trdb.execution.spool import SAMPLED_KEYS, RowSpool
    from trdb.storage.memory import MemoryManager
    spool = RowSpool(MemoryManager(1 << 32).reservation("test"), lambda: None)
    rows = 4 * SAMPLED_KEYS
    rng = np.random.default_rng(1)
    unique, few = rng.permutation(rows), rng.integers(0, 700, rows)
    for start in range(0, rows, 4096):
        part = slice(start, start + 4096)
        spool.append_batch(ColumnBatch([unique[part], few[part], np.zeros((len(unique[part]), 1))],
                                       [False, False, True]))
    every, some = spool.distinct_keys([0, 1])
    assert every == rows and some == 700  # all distinct stays all; a few values repeated stay few
