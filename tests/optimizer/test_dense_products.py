"""dense_products: a SUM of tile products over a join of two whole dense stored matrices runs as one DenseEinsum,
with the keys and tiles the tiled plan gives, and only where the rule's conditions hold."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import trdb

PRODUCT = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"


@pytest.fixture(params=[1, 2], ids=["workers1", "workers2"])
def cur(request):
    con = trdb.connect(workers=request.param)
    yield con.cursor()
    con.close()


def _matrices() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    return rng.standard_normal((300, 200), dtype=np.float32), rng.standard_normal((200, 100), dtype=np.float32)


@pytest.fixture
def arrays(cur):
    a, b = _matrices()
    cur.execute("CREATE TENSOR A FROM ? TILE (128, 64)", [a])  # edge tiles on both axes: 300 = 2 * 128 + 44
    cur.execute("CREATE TENSOR B FROM ? TILE (64, 48)", [b])   # 200 = 3 * 64 + 8, 100 = 2 * 48 + 4
    return a, b


def _plan(cur, query: str) -> str:
    return "\n".join(row[0] for row in cur.execute("EXPLAIN " + query).fetchall())


def _tiles(cur, query: str) -> dict:
    return {tuple(row[:-1]): row[-1] for row in cur.execute(query).fetchall()}


def _tiled(cur, query: str) -> dict:
    cur.execute("SET disabled_rules = 'dense_products'")
    try:
        return _tiles(cur, query)
    finally:
        cur.execute("RESET disabled_rules")


def test_the_product_runs_whole_with_the_tiled_plan_s_keys_and_tiles(cur, arrays):
    a, b = arrays
    assert "DenseEinsumExec(EINSUM('ij,jk->ik', A, B) on whole arrays, tile [128, 48])" in _plan(cur, PRODUCT)
    assert "HashAggregateExec" not in _plan(cur, PRODUCT)
    whole, tiled = _tiles(cur, PRODUCT), _tiled(cur, PRODUCT)
    assert sorted(whole) == sorted(tiled) == [(i, j) for i in range(3) for j in range(3)]
    for key, tile in tiled.items():
        assert whole[key].shape == tile.shape and whole[key].dtype == tile.dtype == np.float32
        np.testing.assert_allclose(whole[key], tile, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cur.execute(PRODUCT).fetch_tensor(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_either_side_of_the_join_and_either_side_of_its_condition(cur, arrays):
    a, b = arrays
    for query in ("SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM B JOIN A ON B.i = A.j GROUP BY A.i, B.j",
                  "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A, B WHERE B.i = A.j GROUP BY A.i, B.j"):
        assert "DenseEinsumExec" in _plan(cur, query)
        np.testing.assert_allclose(cur.execute(query).fetch_tensor(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_a_stored_result_and_a_write_in_between(cur, arrays):
    a, b = arrays
    cur.execute(f"CREATE TENSOR C AS {PRODUCT}")
    np.testing.assert_allclose(cur.execute("SELECT * FROM C").fetch_tensor(), a @ b, rtol=1e-4, atol=1e-4)
    cur.execute("UPDATE A SET v = A.v * 2")  # the whole array of A is made again for its new version
    np.testing.assert_allclose(cur.execute(PRODUCT).fetch_tensor(), 2 * (a @ b), rtol=1e-4, atol=1e-4)


def test_an_absent_tile_keeps_the_tiled_plan_and_its_absent_results(cur, arrays):
    a, b = arrays
    cur.execute("DELETE FROM B WHERE i = 0 AND j = 1")  # B's tile (0, 1) absent
    assert "DenseEinsumExec" not in _plan(cur, PRODUCT)
    bz = b.copy()
    bz[:64, 48:96] = 0
    np.testing.assert_allclose(cur.execute(PRODUCT).fetch_tensor(), a @ bz, rtol=1e-4, atol=1e-4)
    cur.execute("DELETE FROM A WHERE j = 1")  # A's column of tiles 1: B's row 1 meets nothing
    cur.execute("DELETE FROM B WHERE i <> 1")
    assert cur.execute(PRODUCT).fetchall() == []  # no pair joined: no tuple, not zero tiles


def test_csr_tiles_keep_the_tiled_plan(cur):
    sparse = scipy.sparse.random(256, 256, density=0.01, format="csr", dtype=np.float32, random_state=1)
    cur.execute("CREATE TENSOR A FROM ? TILE (128, 128)", [sparse])
    cur.execute("CREATE TENSOR B FROM ? TILE (128, 128)", [np.ones((256, 256), np.float32)])
    assert "DenseEinsumExec" not in _plan(cur, PRODUCT)
    np.testing.assert_allclose(cur.execute(PRODUCT).fetch_tensor(), sparse.toarray() @ np.ones((256, 256)),
                               rtol=1e-4, atol=1e-4)


def test_other_shapes_of_the_query_keep_the_tiled_plan(cur, arrays):
    transposed_keys = "SELECT B.j, A.i, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY B.j, A.i"
    other_join = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.i = B.i GROUP BY A.i, B.j"
    with_filter = PRODUCT.replace("GROUP BY", "WHERE A.i > 0 GROUP BY")
    for query in (transposed_keys, other_join, with_filter):
        assert "DenseEinsumExec" not in _plan(cur, query), query
    tiles = _tiles(cur, transposed_keys)
    assert sorted(tiles) == [(j, i) for j in range(3) for i in range(3)] and tiles[(2, 0)].shape == (128, 4)


def test_tiles_that_do_not_line_up_are_refused_as_before(cur):
    cur.execute("CREATE TENSOR A FROM ? TILE (64, 32)", [np.ones((128, 64), np.float32)])
    cur.execute("CREATE TENSOR B FROM ? TILE (64, 32)", [np.ones((64, 64), np.float32)])  # A's column tile 32, B's rows 64
    with pytest.raises(trdb.ProgrammingError, match="do not align"):  # by the binder: whole arrays would fit
        cur.execute(PRODUCT).fetchall()


def test_beside_tile_products_or_for_a_gradient_in_row_blocks_on_the_workers(cur, arrays):
    """Split into row blocks of whole row tiles (here one each: 3), which the workers' threads take in turn
    (one BLAS thread each), where tile products run beside it or other plans read it; tiled at one worker,
    and past the limit."""
    split = "DenseEinsumExec(EINSUM('ij,jk->ik', A, B) on whole arrays in 3 row blocks on 2 threads, tile [128, 48])"
    workers = int(cur.execute("SHOW workers").fetchall()[0][0])
    cur.execute("CREATE TENSOR D FROM ? TILE (48, 100)", [np.ones((100, 100), np.float32)])
    chain = f"SELECT P.i, D.j, SUM(MATMUL(P.v, D.v)) AS v FROM ({PRODUCT}) AS P JOIN D ON P.j = D.i GROUP BY P.i, D.j"
    assert (split in _plan(cur, chain)) == ("DenseEinsumExec" in _plan(cur, chain)) == (workers == 2)
    a, b = arrays
    np.testing.assert_allclose(cur.execute(chain).fetch_tensor(), a @ b @ np.ones((100, 100)), rtol=1e-3, atol=1e-3)
    cur.execute(f"CREATE VIEW prod AS {PRODUCT}")
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(prod.v)) AS v FROM prod")
    assert (split[:-1] in _plan(cur, "SELECT * FROM GRAD(loss, A)")) == (workers == 2)  # with SUMSQ's 2x after it
    np.testing.assert_allclose(cur.execute("SELECT * FROM GRAD(loss, A)").fetch_tensor(), 2 * (a @ b) @ b.T,
                               rtol=1e-3, atol=1e-3)
    cur.execute("SET dense_einsum_bytes = '100KB'")  # A alone is 240 KB
    assert "DenseEinsumExec" not in _plan(cur, PRODUCT) and "DenseEinsumExec" not in _plan(cur, chain)


def _beside_tile_products(inner: str) -> str:
    """`inner` (a query of P's keys and tensor columns) read by a product with D's tiles: tile products beside."""
    return (f"SELECT P.i, D.j, SUM(MATMUL(P.v, D.v)) AS v FROM ({inner}) AS P JOIN D ON P.j = D.i "
            "GROUP BY P.i, D.j")


@pytest.mark.parametrize("workers", [2, 3])
def test_row_blocks_give_the_tiled_plan_s_tiles_under_their_keys(workers):
    """Row blocks of whole row tiles (300 rows in 128-row tiles: 3 blocks of one tile each, the last 44
    rows), taken by 2 or 3 threads, edge tiles included: every tile under its key, as the tiled plan gives it."""
    a, b = _matrices()
    con = trdb.connect(workers=workers)
    cur = con.cursor()
    cur.execute("CREATE TENSOR A FROM ? TILE (128, 64)", [a])
    cur.execute("CREATE TENSOR B FROM ? TILE (64, 48)", [b])
    cur.execute("CREATE TENSOR D FROM ? TILE (48, 7)", [np.arange(700, dtype=np.float32).reshape(100, 7) / 700])
    query = _beside_tile_products(PRODUCT)
    assert f"in 3 row blocks on {workers} threads" in _plan(cur, query)
    whole, tiled = _tiles(cur, query), _tiled(cur, query)
    assert sorted(whole) == sorted(tiled) == [(i, 0) for i in range(3)]
    for key, tile in tiled.items():
        assert whole[key].shape == tile.shape
        np.testing.assert_allclose(whole[key], tile, rtol=1e-4, atol=1e-4)
    d = np.arange(700).reshape(100, 7) / 700
    np.testing.assert_allclose(cur.execute(query).fetch_tensor(), a.astype(np.float64) @ b @ d, rtol=1e-3, atol=1e-3)
    con.close()


def test_an_elementwise_kernel_of_the_product_runs_on_each_tile_of_the_blocks(cur, arrays):
    """RELU(P.v) above a split product runs in it, tile by tile (each tile an array of its own), and so does
    one column's expression that reads the product twice; a product two columns read keeps its projection."""
    a, b = arrays
    workers = int(cur.execute("SHOW workers").fetchall()[0][0])
    cur.execute("CREATE TENSOR D FROM ? TILE (48, 100)", [np.ones((100, 100), np.float32)])
    relu = _beside_tile_products(f"SELECT P.i, P.j, RELU(P.v * 2) AS v FROM ({PRODUCT}) AS P")
    plan = _plan(cur, relu)
    assert ("each RELU((tile * 2))" in plan) == (workers == 2), plan
    expected = np.maximum(2 * (a.astype(np.float64) @ b), 0) @ np.ones((100, 100))
    np.testing.assert_allclose(cur.execute(relu).fetch_tensor(), expected, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(cur.execute(relu).fetch_tensor(), _tiled_tensor(cur, relu), rtol=1e-4, atol=1e-3)
    twice = _beside_tile_products(f"SELECT P.i, P.j, RELU(P.v) + P.v AS v FROM ({PRODUCT}) AS P")
    assert ("each (RELU(tile) + tile)" in _plan(cur, twice)) == (workers == 2)  # one column: one call a tile
    np.testing.assert_allclose(cur.execute(twice).fetch_tensor(), _tiled_tensor(cur, twice), rtol=1e-4, atol=1e-3)
    both = ("SELECT P.i, D.j, SUM(MATMUL(P.r - P.v, D.v)) AS v FROM (SELECT A.i, B.j, RELU(SUM(MATMUL(A.v, B.v))) "
            "AS r, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j) AS P JOIN D ON P.j = D.i "
            "GROUP BY P.i, D.j")
    assert "each" not in _plan(cur, both)  # two columns of the product: the projection makes both
    expected = (np.maximum(a.astype(np.float64) @ b, 0) - a.astype(np.float64) @ b) @ np.ones((100, 100))
    np.testing.assert_allclose(cur.execute(both).fetch_tensor(), expected, rtol=1e-3, atol=1e-3)


def _tiled_tensor(cur, query: str) -> np.ndarray:
    cur.execute("SET disabled_rules = 'dense_products'")
    try:
        return cur.execute(query).fetch_tensor()
    finally:
        cur.execute("RESET disabled_rules")


def test_the_blocks_work_is_counted_as_the_tiled_plan_s():
    """EXPLAIN ANALYZE charges the product's FLOPs, done on the blocks' threads, to the DenseEinsum."""
    a, b = _matrices()
    con = trdb.connect(workers=2)
    cur = con.cursor()
    cur.execute("CREATE TENSOR A FROM ? TILE (128, 64)", [a])
    cur.execute("CREATE TENSOR B FROM ? TILE (64, 48)", [b])
    cur.execute("CREATE TENSOR D FROM ? TILE (48, 100)", [np.ones((100, 100), np.float32)])
    query = _beside_tile_products(f"SELECT P.i, P.j, RELU(P.v) AS v FROM ({PRODUCT}) AS P")
    lines = [row[0] for row in cur.execute("EXPLAIN ANALYZE " + query).fetchall()]
    (dense,) = [line for line in lines if "DenseEinsumExec" in line]
    assert "flops=12.0M kernel_bytes" in dense.split("[actual")[1]  # 2 * 300 * 200 * 100, the RELUs' 30 K beside
    cur.execute("SET disabled_rules = 'dense_products'")
    tiled = [row[0] for row in cur.execute("EXPLAIN ANALYZE " + query).fetchall()]
    totals = [int(line.split("(")[1].split(")")[0]) for text in (lines, tiled) for line in text
              if line.startswith("Executed work:")]
    # the same but for the tiled plan's adds of each sum's 4 products (3 a tile of 300 x 100), done inside BLAS
    assert totals[0] == totals[1] - 3 * 300 * 100
    con.close()
