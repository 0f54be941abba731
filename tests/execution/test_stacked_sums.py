"""SUM, AVG and COUNT over many small tiles summed stacked (tile_math/stacked_sums.py) give numpy's answers, in
groups and without, over ragged edge tiles, CSR tiles and integer tiles (which go tuple by tuple), and charge their work."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import trdb
from trdb.execution.tile_math import stacked_sums


@pytest.fixture(params=[1, 2], ids=["workers1", "workers2"])
def con(request):
    with trdb.connect(workers=request.param, min_parallel_cost=0) as connection:
        yield connection


def test_sums_of_many_small_tiles_match_numpy(con, monkeypatch):
    called = []
    original = stacked_sums._group_sums
    monkeypatch.setattr(stacked_sums, "_group_sums", lambda *a: called.append(1) or original(*a))
    a = np.random.default_rng(1).standard_normal((203, 30)).astype(np.float64)  # ragged edges: 203 = 50 * 4 + 3
    con.execute("CREATE TENSOR A FROM ? TILE (4, 8)", [a])
    total = con.execute("SELECT SUM(SUMSQ(A.v * 2 - 1)) AS v FROM A").fetchone()[0]
    np.testing.assert_allclose(float(total), ((a * 2 - 1) ** 2).sum(), rtol=1e-12)
    rows = con.execute("SELECT A.j, SUM(REDUCE_SUM(A.v)) AS s, AVG(SUMSQ(A.v)) AS m, COUNT(*) AS n FROM A "
                       "GROUP BY A.j ORDER BY A.j").fetchall()
    for j, s, m, n in rows:
        block = a[:, j * 8:(j + 1) * 8]
        tiles = [block[i:i + 4] for i in range(0, 203, 4)]
        assert n == len(tiles)
        np.testing.assert_allclose(float(s), block.sum(), rtol=1e-12)
        np.testing.assert_allclose(float(m), np.mean([(t ** 2).sum() for t in tiles]), rtol=1e-12)
    for j, tile in con.execute("SELECT A.j, SUM(A.v) AS v FROM A WHERE A.i < 50 GROUP BY A.j").fetchall():
        block = a[:200, j * 8:(j + 1) * 8]
        np.testing.assert_allclose(tile, block.reshape(50, 4, block.shape[1]).sum(axis=0), rtol=1e-12)
    assert called  # the stacked path ran


def test_float32_tile_sums_match_numpy(con):
    a = np.random.default_rng(2).standard_normal((64, 6)).astype(np.float32)
    con.execute("CREATE TENSOR A FROM ? TILE (2, 3)", [a])
    for j, tile in con.execute("SELECT A.j, SUM(A.v) AS v FROM A GROUP BY A.j").fetchall():
        assert tile.dtype == np.float32
        np.testing.assert_allclose(tile, a[:, j * 3:(j + 1) * 3].astype(np.float64).reshape(32, 2, 3).sum(axis=0),
                                   rtol=1e-5)


def test_csr_and_integer_tiles_go_tuple_by_tuple_with_the_same_answers(con):
    s = scipy.sparse.random(64, 64, density=0.02, format="csr", random_state=3, dtype=np.float64)
    con.execute("CREATE TENSOR S FROM ? TILE (4, 4)", [s])
    total = float(con.execute("SELECT SUM(SUMSQ(S.v)) AS v FROM S").fetchone()[0])
    np.testing.assert_allclose(total, (s.toarray() ** 2).sum(), rtol=1e-12)
    ints = np.arange(128, dtype=np.int32).reshape(64, 2)
    con.execute("CREATE TENSOR I FROM ? TILE (2, 2)", [ints])
    assert int(con.execute("SELECT SUM(REDUCE_SUM(I.v)) AS v FROM I").fetchone()[0]) == int(ints.sum())


def test_explain_analyze_counts_the_stacked_work():
    with trdb.connect(workers=1) as con:
        con.execute("CREATE TENSOR A SHAPE (256, 8) TILE (1, 8) FILL ONES")
        plan = "\n".join(r[0] for r in con.execute("EXPLAIN ANALYZE SELECT SUM(SUMSQ(A.v)) AS v FROM A").fetchall())
    line = next(line for line in plan.splitlines() if "HashAggregateExec" in line)
    assert "flops=" in line.split("actual")[1], line


@pytest.fixture
def steps(monkeypatch) -> list:
    """One entry for each value an accumulator adds (a step a tuple, on the tuple-by-tuple path)."""
    from trdb.execution.operators.accumulator import Accumulator
    added: list = []
    add = Accumulator.add
    monkeypatch.setattr(Accumulator, "add", lambda self, *a, **k: added.append(1) or add(self, *a, **k))
    return added


def test_counts_alone_are_counted_by_group_without_a_step_per_tuple(con, steps):
    """COUNT(*) (or COUNT of a tensor) with no other call reads no tile: its groups are counted as arrays too (one
    accumulator step a tuple took 0.93 s over 1,000,000 tuples)."""
    con.execute("CREATE TENSOR A SHAPE (5000, 4) TILE (1, 4) FILL ONES")
    assert con.execute("SELECT COUNT(*) AS n FROM A").fetchall() == [(5000,)]
    assert con.execute("SELECT COUNT(A.v * 2) AS n FROM A").fetchall() == [(5000,)]  # a tensor is never NULL
    assert con.execute("SELECT A.i % 3 AS g, COUNT(*) AS n FROM A GROUP BY A.i % 3 ORDER BY g").fetchall() == \
        [(0, 1667), (1, 1667), (2, 1666)]
    assert con.execute("SELECT COUNT(*) AS n FROM A WHERE A.i >= 4990").fetchall() == [(10,)]
    assert len(steps) < 100  # a few: two workers' partial counts added at the end (tuple by tuple: 15,010)


def test_sums_of_small_products_are_one_batched_matmul(con, monkeypatch):
    """SUM(MATMUL(...)) of small tiles (a row's outer product: X^T X over rows of 8) is summed stacked, by group
    too, with numpy's values; a product of large tiles still goes into its group's tile as it is made."""
    from trdb.execution.operators import hash_aggregate
    calls, real = [], hash_aggregate.product_sum_feed

    def counted(*args):
        feed = real(*args)  # a tuple's product added into its group's tile
        return None if feed is None else (lambda accumulator, row: calls.append(1) or feed(accumulator, row))
    monkeypatch.setattr(hash_aggregate, "product_sum_feed", counted)
    x = np.random.default_rng(4).standard_normal((3000, 8))
    con.execute("CREATE TENSOR X FROM ? TILE (1, 8) DTYPE float64", [x])
    gram = con.execute("SELECT SUM(MATMUL(TRANSPOSE(X.v), X.v)) AS g FROM X").fetchone()[0]
    np.testing.assert_allclose(gram, x.T @ x, rtol=1e-10)
    rows = con.execute("SELECT X.i % 3 AS g, SUM(MATMUL(TRANSPOSE(X.v), X.v)) AS v FROM X GROUP BY X.i % 3").fetchall()
    for g, value in rows:
        np.testing.assert_allclose(value, x[g::3].T @ x[g::3], rtol=1e-10)
    assert len(rows) == 3 and len(calls) < 100  # not a call a tuple (6,000)
    con.execute("CREATE TENSOR L FROM ? TILE (32, 32) DTYPE float64", [np.ones((64, 64))])
    con.execute("SELECT SUM(MATMUL(L.v, L.v)) AS v FROM L").fetchall()
    assert len(calls) >= 4  # products of 32 x 32 tiles: each added into its group's tile


def test_a_product_with_a_broadcast_tile_is_summed_stacked(con, steps):
    """Rows of 1 x 8 times one 8 x 8 weight (a cross join with its one tile): stacks of two tile shapes, paired by a
    batched matmul, where elementwise sums need one shape."""
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((2000, 8)), rng.standard_normal((8, 8))
    con.execute("CREATE TENSOR X FROM ? TILE (1, 8) DTYPE float64", [x])
    con.execute("CREATE TENSOR W FROM ? TILE (8, 8) DTYPE float64", [w])
    total = con.execute("SELECT SUM(SUMSQ(MATMUL(X.v, W.v) - X.v)) AS s FROM X JOIN W ON W.i = 0").fetchone()[0]
    np.testing.assert_allclose(float(total), ((x @ w - x) ** 2).sum(), rtol=1e-10)
    assert len(steps) < 100  # not a step a tuple (2,000)


def test_min_and_max_of_keys_are_taken_from_the_key_arrays(con, steps):
    """MIN and MAX of key columns over column batches come from their arrays, as Python ints (as keys are), by
    group too; over an outer join's NULL keys they go tuple by tuple and skip the NULLs."""
    con.execute("CREATE TENSOR A SHAPE (3000, 8) TILE (1, 4) FILL ONES")
    assert con.execute("SELECT MIN(A.i) AS lo, MAX(A.i) AS hi, MAX(A.j) AS j FROM A WHERE A.i > 7").fetchall() == \
        [(8, 2999, 1)]
    rows = con.execute("SELECT A.i % 4 AS g, MIN(A.i) AS lo, MAX(A.i) AS hi, SUM(A.v) AS s FROM A "
                       "GROUP BY A.i % 4 ORDER BY g").fetchall()
    assert [row[:3] for row in rows] == [(g, g, 2996 + g) for g in range(4)]
    assert all(type(v) is int for row in rows for v in row[:3])
    np.testing.assert_array_equal(rows[0][3], np.full((1, 4), 1500.0, np.float32))
    assert len(steps) < 100  # a few: two workers' partial results combined (tuple by tuple: 12,000)
    con.execute("CREATE TENSOR B SHAPE (10, 4) TILE (1, 4) FILL ONES")
    assert con.execute("SELECT MIN(B.i) AS lo, MAX(B.i) AS hi FROM A LEFT JOIN B ON A.i = B.i AND A.j = B.j "
                       "WHERE A.i < 20").fetchall() == [(0, 9)]
