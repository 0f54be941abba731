"""Result placement: a dense product's sums are written into the array fetch_tensor() returns (no copy),
and every case the canvas cannot serve assembles the tiles as before, with numpy as the oracle."""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from trdb.execution import result_canvas as placement

pytestmark = pytest.mark.on_cpu  # the result canvas is host memory (conftest.py)

MATMUL = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"


@pytest.fixture
def handed_over(monkeypatch):
    """Whether each fetch_tensor() was served by the canvas (True) or assembled by copying (False)."""
    seen = []
    original = placement.ResultCanvas.assembled

    def spy(self, *args):
        array = original(self, *args)
        seen.append(array is not None)
        return array
    monkeypatch.setattr(placement.ResultCanvas, "assembled", spy)
    return seen


def _connect(workers: int, a: np.ndarray, b: np.ndarray, tile=(128, 128), **settings):
    # tile products (no DenseEinsum: dense_products), placed in the result's array
    con = trdb.connect(workers=workers, **{'dense_einsum_bytes': 0, **settings})
    cur = con.cursor()
    cur.execute(f"CREATE TENSOR A FROM ? TILE {tile}", [a])
    cur.execute(f"CREATE TENSOR B FROM ? TILE {tile[::-1]}", [b])
    return con, cur


@pytest.mark.parametrize("workers", [1, 2])
def test_a_product_is_handed_over_in_the_array_its_sums_were_computed_in(workers, handed_over):
    rng = np.random.default_rng(workers)
    a, b = rng.standard_normal((300, 200), dtype=np.float32), rng.standard_normal((200, 250), dtype=np.float32)
    con, cur = _connect(workers, a, b)  # edge tiles on every axis: 300 = 2 * 128 + 44
    for _ in range(2):  # planned, then from the plan cache
        got = cur.execute(MATMUL).fetch_tensor()
        np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
        assert got.dtype == np.float32 and got.flags.c_contiguous and got.flags.writeable
    assert handed_over == [True, True]
    got[:] = 7  # the caller's array: the next statement computes its own
    np.testing.assert_allclose(cur.execute(MATMUL).fetch_tensor(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    flops = [r[0] for r in cur.execute("EXPLAIN ANALYZE " + MATMUL).fetchall() if r[0].startswith("Executed work")]
    assert f"({2 * 300 * 200 * 250 + 300 * 250})" in flops[0]  # placed products are counted, the one add per element
    con.close()


def test_rows_fetched_as_tiles_are_the_placed_sums(handed_over):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((256, 256), dtype=np.float32), rng.standard_normal((256, 256), dtype=np.float32)
    con, cur = _connect(2, a, b)
    expected = a.astype(np.float64) @ b
    for i, j, tile in cur.execute(MATMUL).fetchall():
        np.testing.assert_allclose(tile, expected[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128], rtol=1e-4, atol=1e-4)
    cur.execute(MATMUL).fetchone()  # the rest only: the canvas holds the first tile too, so it is not handed over
    i, j, _ = cur.execute(MATMUL).fetchone()
    rest = cur.fetch_tensor()
    expected[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = 0
    np.testing.assert_allclose(rest, expected, rtol=1e-4, atol=1e-4)
    assert handed_over == [False]
    con.close()


def test_another_shape_absent_tiles_and_an_outer_product(handed_over):
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((256, 256), dtype=np.float32), rng.standard_normal((256, 256), dtype=np.float32)
    a[:128, :] = 0  # A's first row of tiles is absent: so is C's
    con, cur = _connect(1, a, b)
    cur.execute("DELETE FROM A WHERE A.i = 0")  # a dense load stores its zero tiles too (zeros are values)
    expected = a.astype(np.float64) @ b
    assert cur.execute("SELECT COUNT(*) FROM A").fetchone() == (2,)
    np.testing.assert_allclose(cur.execute(MATMUL).fetch_tensor(), expected, rtol=1e-4, atol=1e-4)
    bigger = cur.execute(MATMUL).fetch_tensor(shape=(300, 256))
    np.testing.assert_allclose(bigger[:256], expected, rtol=1e-4, atol=1e-4)
    assert not bigger[256:].any()
    assert handed_over == [True, False]
    con.close()
    u, v = rng.standard_normal((300, 1), dtype=np.float32), rng.standard_normal((1, 200), dtype=np.float32)
    con, cur = _connect(2, u, v, tile=(128, 1))  # inner dimension 1: the kernel's broadcast multiply
    np.testing.assert_allclose(cur.execute(MATMUL).fetch_tensor(), u.astype(np.float64) @ v, rtol=1e-6, atol=1e-6)
    con.close()


def test_a_spilled_aggregate_assembles_its_merged_tiles(handed_over):
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((512, 512), dtype=np.float32), rng.standard_normal((512, 512), dtype=np.float32)
    con, cur = _connect(1, a, b, tile=(64, 64), memory_limit="2MB")
    plan = [r[0] for r in cur.execute("EXPLAIN ANALYZE " + MATMUL).fetchall()]
    assert any("spilled=" in line for line in plan if "HashAggregateExec" in line), plan
    np.testing.assert_allclose(cur.execute(MATMUL).fetch_tensor(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    con.close()


def test_only_a_final_dense_product_sum_gets_a_canvas(monkeypatch):
    from trdb.pipeline import query
    made = []
    monkeypatch.setattr(query, "canvas_for", lambda node, budget: made.append(c := placement.canvas_for(node, budget)) or c)
    con = trdb.connect(workers=2)
    cur = con.cursor()
    cur.execute("CREATE TENSOR F FROM ? TILE (2, 2)", [np.ones((4, 4), np.float32)])
    cur.execute("CREATE TENSOR N FROM ? TILE (2, 2)", [np.ones((4, 4), np.int64)])

    def placed(sql: str) -> bool:
        made.clear()
        cur.execute(sql).fetchall()
        return made != [None]
    product = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM {0} AS A JOIN {0} AS B ON A.j = B.i GROUP BY A.i, B.j"
    assert placed(product.format("F"))
    assert not placed(product.format("N"))  # integers: BLAS writes no integer product in place
    assert not placed("SELECT F.i, SUM(F.v) AS v FROM F GROUP BY F.i")
    assert not placed("SELECT F.i, F.j, F.v * 2 AS v FROM F")
    transposed = f"SELECT C.j AS i, C.i AS j, TRANSPOSE(C.v) AS v FROM ({product.format('F')}) AS C"
    assert not placed(transposed)  # the product is not the last operator
    cur.execute("SET memory_limit = '1MB'")
    cur.execute("CREATE TENSOR G SHAPE (1024, 1024) TILE (256, 256) FILL ONES")
    assert not placed(product.format("G"))  # 4 MiB: more than the result may hold in memory
    con.close()


@pytest.mark.parametrize("width", [16, 8])
def test_a_sparse_times_dense_product_is_placed_where_its_tiles_span_whole_rows(width, handed_over):
    import pyarrow as pa
    rng = np.random.default_rng(6)
    n, m = 96, 16
    src, dst = rng.integers(0, n, 300), rng.integers(0, n, 300)
    weight = rng.standard_normal(300).astype(np.float32)
    dense_a = np.zeros((n, n), np.float64)
    np.add.at(dense_a, (src, dst), weight)
    x = rng.standard_normal((n, m), dtype=np.float32)
    con = trdb.connect(workers=2)
    cur = con.cursor()
    cur.execute(f"CREATE TENSOR A FROM COO ? (src, dst, weight) SHAPE ({n}, {n}) TILE (32, 32)",
                [pa.table({"src": src, "dst": dst, "weight": weight})])
    assert con._session().catalog.tensor("A").csr_tuples > 0  # A's tiles are CSR
    cur.execute(f"CREATE TENSOR X FROM ? TILE (32, {width})", [x])
    query = "SELECT A.i, X.j, SUM(MATMUL(A.v, X.v)) AS v FROM A JOIN X ON A.j = X.i GROUP BY A.i, X.j"
    np.testing.assert_allclose(cur.execute(query).fetch_tensor(), dense_a @ x, rtol=1e-4, atol=1e-4)
    # scipy's CSR kernel writes a C-ordered block: placed where a tile spans the result's whole rows only
    assert handed_over == [width == m]
    con.close()


def _einsum_flops(con, sql: str) -> str:
    return next(r[0] for r in con.cursor().execute("EXPLAIN ANALYZE " + sql).fetchall()
                if r[0].startswith("Executed work"))


@pytest.mark.parametrize("workers", [1, 2])
def test_einsum_products_are_placed_as_projections_and_as_sums(workers, handed_over):
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((300, 40), dtype=np.float32), rng.standard_normal((40, 260), dtype=np.float32)
    c = rng.standard_normal((260, 40), dtype=np.float32)
    con = trdb.connect(workers=workers, dense_einsum_bytes=0)  # decomposed: whole arrays are the next test's
    cur = con.cursor()
    cur.execute("CREATE TENSOR A FROM ? TILE (128, 40)", [a])  # edge tiles: 300 = 2 * 128 + 44
    cur.execute("CREATE TENSOR B FROM ? TILE (40, 128)", [b])
    cur.execute("CREATE TENSOR C FROM ? TILE (128, 40)", [c])
    cases = {  # the root a projection of one product per tuple (the summed letter whole in a tile) ...
        "SELECT * FROM EINSUM('ij,jk,kl->il', A, B, C)": a.astype(np.float64) @ (b.astype(np.float64) @ c),
        "SELECT * FROM EINSUM('ij,kj->ik', A, C)": a.astype(np.float64) @ c.T,  # a transposed operand
        # ... or a sum of products over the summed letter's tiles, grouped by the output keys
        "SELECT * FROM EINSUM('ij,jk->ik', B, C)": b.astype(np.float64) @ c,
        "SELECT * FROM EINSUM('ji,jk->ki', A, A)": a.T.astype(np.float64) @ a,
    }
    for sql, expected in cases.items():
        for _ in range(2):  # planned, then from the plan cache
            got = cur.execute(sql).fetch_tensor()
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
            assert got.dtype == np.float32 and got.flags.writeable
    # at 2 workers (the suite partitions every plan) a sum of no keys is two partial sums, added by a final
    # SUM of no product: only the projections are placed there
    assert handed_over == [True] * (8 if workers == 1 else 4)
    m, n = 300, 260
    # placed products are counted: B C over three tiles of k (two adds of a 40 x 40 tile), then A (B C)
    assert f"({2 * 40 * 260 * 40 + 2 * 300 * 40 * 40 + 2 * 40 * 40})" in _einsum_flops(con, list(cases)[0])
    assert f"({2 * m * 40 * n})" in _einsum_flops(con, list(cases)[1])
    con.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_an_einsum_on_whole_arrays_hands_its_result_over(workers, handed_over):
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((300, 40), dtype=np.float32), rng.standard_normal((40, 260), dtype=np.float32)
    c = rng.standard_normal((260, 40), dtype=np.float32)
    con = trdb.connect(workers=workers)
    cur = con.cursor()
    for name, array, tile in [("A", a, (128, 40)), ("B", b, (40, 128)), ("C", c, (128, 40))]:
        cur.execute(f"CREATE TENSOR {name} FROM ? TILE {tile}", [array])
    cases = {
        "SELECT * FROM EINSUM('ij,jk,kl->il', A, B, C)": a.astype(np.float64) @ (b.astype(np.float64) @ c),
        "SELECT * FROM EINSUM('ij,jk->ik', B, C)": b.astype(np.float64) @ c,
        "SELECT * FROM EINSUM('bi,bj->bij', A, A)": np.einsum("bi,bj->bij", a.astype(np.float64), a),  # rank 3
    }
    for sql, expected in cases.items():
        assert "DenseEinsumExec" in "\n".join(r[0] for r in cur.execute("EXPLAIN " + sql).fetchall())
        for _ in range(2):
            got = cur.execute(sql).fetch_tensor()
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
            assert got.dtype == np.float32 and got.flags.writeable
            got[...] = 0  # the caller's array: the next run computes anew
    assert handed_over == [True] * 6
    got = cur.execute("SELECT * FROM EINSUM('ij,jk->ik', B, C)").fetch_tensor(shape=(50, 40))  # another shape
    np.testing.assert_allclose(got[:40], b.astype(np.float64) @ c, rtol=1e-4, atol=1e-4)
    assert not got[40:].any() and handed_over[-1] is False
    con.close()


def test_a_projected_matmul_is_placed_and_one_that_is_not_one_tensor_still_fails(handed_over):
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((256, 64), dtype=np.float32), rng.standard_normal((64, 200), dtype=np.float32)
    con, cur = _connect(2, a, b, tile=(128, 64))
    projected = "SELECT A.i, B.j, MATMUL(A.v, B.v) AS v FROM A JOIN B ON A.j = B.i"
    np.testing.assert_allclose(cur.execute(projected).fetch_tensor(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert handed_over == [True]
    twice = "SELECT A.i, B.i AS j, MATMUL(A.v, B.v) AS v FROM A JOIN B ON A.j = B.i"  # B's two tiles: one key
    with pytest.raises(trdb.DataError, match="tuples under key"):
        cur.execute(twice).fetch_tensor()
    con.close()


def test_the_canvas_zeroes_only_what_no_product_wrote(monkeypatch):
    """Not zeroed when made: a place asked for `zeroed` is, and the places of absent tiles are when the
    array is handed over (here the memory starts as NaN, as reused heap memory may hold anything)."""
    canvas = placement.ResultCanvas(None, (5, 4), (2, 2), np.dtype(np.float64))
    canvas.array[...] = np.nan
    written = canvas.slot((0, 0), (2, 2), np.dtype(np.float64))
    written[...] = 1.0  # a product computed into its place
    added_into = canvas.slot((2, 1), (1, 2), np.dtype(np.float64), zeroed=True)  # an edge tile
    assert not added_into.any()
    added_into += 2.0
    rows = [(0, 0, written), (2, 1, added_into)]
    result = canvas.assembled(rows, (0, 1), 2, (5, 4))
    expected = np.zeros((5, 4))
    expected[:2, :2], expected[4:, 2:] = 1.0, 2.0
    np.testing.assert_array_equal(result, expected)
    monkeypatch.setattr(placement, "MAX_GRID_SCANNED", 4)  # 6 tiles in the grid: assembled from the rows
    canvas = placement.ResultCanvas(None, (5, 4), (2, 2), np.dtype(np.float64))
    view = canvas.slot((0, 0), (2, 2), np.dtype(np.float64))
    view[...] = 1.0
    assert canvas.assembled([(0, 0, view)], (0, 1), 2, (5, 4)) is None
