"""CSR tiles (issue 4): storage, formats chosen by density, and queries over every format combination.

Matrices are built so that each tile's format is known: "csr" tiles hold ~4% non-zeros (below
CSR_MAX_DENSITY), "dense" tiles are full, "mixed" alternates the two; some tiles are absent in
each (block sparsity). Oracles are scipy.sparse and numpy in float64; queries run with workers 1
and 2; results are read with fetch_sparse() and fetch_tensor().
"""
from __future__ import annotations

import math
import tracemalloc

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import scipy.sparse

import trdb
from trdb.config.unit_costs import CSR_MAX_DENSITY
from trdb.kernels.sparse import is_sparse
from trdb.storage.tile_codec import CSR32, DENSE

T = 16
ROWS, INNER, COLS = 50, 45, 37  # ragged edge tiles on every axis
FORMATS = ("dense", "csr", "mixed")
PAIRS = [("dense", "dense"), ("csr", "dense"), ("dense", "csr"), ("csr", "csr"), ("mixed", "dense"), ("mixed", "mixed")]


def make(fmt, shape, seed, keep=0.7):
    """A float32 CSR matrix whose present t x t tiles are full ("dense") or ~4% full ("csr")."""
    rng = np.random.default_rng(seed)
    out = np.zeros(shape, np.float32)
    grid = [math.ceil(n / T) for n in shape]
    for number, (bi, bj) in enumerate(np.ndindex(*grid)):
        if rng.random() > keep and number:
            continue  # an absent tile (the first is always present)
        block = out[bi * T:(bi + 1) * T, bj * T:(bj + 1) * T]
        as_csr = fmt == "csr" or (fmt == "mixed" and number % 2)
        mask = rng.random(block.shape) < (0.04 if as_csr else 2.0)
        mask.flat[rng.integers(mask.size)] = True
        block[mask] = rng.choice([-1.0, 1.0], mask.sum()) * rng.uniform(0.5, 2.0, mask.sum())
    return scipy.sparse.csr_array(out)


def load(cur, name, matrix, tile=(T, T)):
    cur.execute(f"CREATE TENSOR {name} FROM ? TILE ({tile[0]}, {tile[1]})", [matrix])
    return scipy.sparse.csr_array(matrix, dtype=np.float64)


def describe(cur, name) -> tuple[int, float, int]:
    """(tuples, density, CSR tuples) from DESCRIBE."""
    row = [r for r in cur.execute(f"DESCRIBE {name}").fetchall() if r[2] == "value"][0]
    return row[5], row[6], row[7]


def nonzero_tiles(matrix, tile=(T, T)) -> int:
    r, c = np.nonzero(matrix.toarray() if scipy.sparse.issparse(matrix) else matrix)
    return len(set(zip((r // tile[0]).tolist(), (c // tile[1]).tolist())))


def tile_pattern(matrix, tile=(T, T)) -> np.ndarray:
    """Which tiles of `matrix` hold a non-zero."""
    r, c = np.nonzero(matrix.toarray() if scipy.sparse.issparse(matrix) else matrix)
    pattern = np.zeros([math.ceil(n / t) for n, t in zip(matrix.shape, tile)], dtype=bool)
    pattern[r // tile[0], c // tile[1]] = True
    return pattern


def csr_tiles(matrix, tile=(T, T)) -> int:
    """Tiles of `matrix` that the density rule stores as CSR."""
    coo = scipy.sparse.coo_array(matrix)
    counts: dict = {}
    for r, c in zip((coo.row // tile[0]).tolist(), (coo.col // tile[1]).tolist()):
        counts[(r, c)] = counts.get((r, c), 0) + 1
    n, m = matrix.shape
    return sum(1 for (r, c), k in counts.items()
               if k <= CSR_MAX_DENSITY * min(tile[0], n - r * tile[0]) * min(tile[1], m - c * tile[1]))


def assert_result(cur, query, expected, shape=None):
    expected = scipy.sparse.csr_array(expected)
    expected.eliminate_zeros()
    got = cur.execute(query).fetch_sparse()
    np.testing.assert_allclose(got.toarray(), expected.toarray(), rtol=1e-5, atol=1e-5)
    assert got.nnz == expected.nnz
    dense = cur.execute(query).fetch_tensor(shape=shape or expected.shape)
    np.testing.assert_allclose(dense, expected.toarray(), rtol=1e-5, atol=1e-5)


@pytest.fixture(params=[1, 2], ids=["workers1", "workers2"])
def cur(request, con):
    cursor = con.cursor()
    cursor.execute(f"SET workers = {request.param}")
    return cursor


# ------------------------------------------------------------ storage


def test_a_tile_with_few_nonzeros_is_stored_as_csr_and_round_trips(tmp_path):
    path = str(tmp_path / "sparse.trdb")
    matrix = scipy.sparse.csr_array(([3.0, -1.5, 2.0], ([0, 7, 63], [5, 63, 0])), shape=(64, 64), dtype=np.float32)
    with trdb.connect(path) as con:
        con.execute("CREATE TENSOR A FROM ? TILE (64, 64)", [matrix])
        catalog = con._live.catalog
        keys, nnz, formats = catalog.tile_nonzeros(catalog.tensor("A"))
        assert keys.tolist() == [[0, 0]] and nnz.tolist() == [3] and formats.tolist() == [CSR32]
        (tile,) = catalog.tiles(catalog.tensor("A"))[1]
        assert is_sparse(tile) and tile.nnz == 3 and tile.dtype == np.float32
    with trdb.connect(path) as con:  # persisted, and read back as CSR
        cur = con.cursor()
        assert describe(cur, "A") == (1, pytest.approx(3 / 64 ** 2, abs=1e-6), 1)
        got = cur.execute("SELECT * FROM A").fetch_sparse()
        assert (got != matrix).nnz == 0
        (row,) = cur.execute("SELECT * FROM A").fetchall()  # fetchall gives numpy tiles
        assert isinstance(row[2], np.ndarray) and row[2][7, 63] == -1.5
        meta = con._live.catalog.tensor("A")
        assert (meta.csr_tuples, meta.csr_nnz, meta.dense_tuples) == (1, 3, 0)
        assert meta.tile_density == pytest.approx(3 / 64 ** 2)


@pytest.mark.parametrize("fmt", FORMATS)
def test_formats_tuples_and_density(cur, fmt):
    matrix = make(fmt, (ROWS, INNER), seed=1)
    oracle = load(cur, "A", matrix)
    tuples, density, csr = describe(cur, "A")
    assert tuples == nonzero_tiles(matrix)
    assert density == pytest.approx(matrix.nnz / (ROWS * INNER), abs=1e-6)
    assert csr == csr_tiles(matrix)
    assert (csr == 0) == (fmt == "dense") and (csr == tuples) == (fmt == "csr")
    assert_result(cur, "SELECT * FROM A", oracle)


def test_higher_ranks_stay_dense(cur):
    data = np.zeros((20, 20, 4), np.float32)
    data[3, 4, 1] = 2.0
    cur.execute("CREATE TENSOR A FROM ? TILE (10, 10, 4)", [data])
    assert describe(cur, "A")[0] == 4 and describe(cur, "A")[2] == 0  # zeros are values: every tile, dense
    np.testing.assert_array_equal(cur.execute("SELECT * FROM A").fetch_tensor(), data)


def test_buffer_pool_caches_csr_tiles(con):
    cur = con.cursor()
    load(cur, "A", make("csr", (ROWS, INNER), seed=2))
    pool = con._live.pool
    cur.execute("SELECT * FROM A").fetchall()
    misses = pool.misses
    cur.execute("SELECT * FROM A").fetchall()
    assert pool.misses == misses and pool.hits > 0


def test_old_databases_without_formats_are_read_and_upgraded(tmp_path):
    """A database written before CSR tiles (no fmt column, no CSR statistics) opens; its tiles are dense."""
    path = str(tmp_path / "old.trdb")
    old = duckdb.connect(path)
    old.execute("CREATE SCHEMA _trdb")
    old.execute("CREATE TABLE _trdb.tensors (name VARCHAR PRIMARY KEY, keys VARCHAR, value_name VARCHAR, "
                "dtype VARCHAR, shape VARCHAR, tile VARCHAR, tile_table VARCHAR, tuple_count BIGINT, nnz BIGINT)")
    old.execute("CREATE TABLE _trdb.views (name VARCHAR PRIMARY KEY, query VARCHAR)")
    old.execute("CREATE SEQUENCE _trdb.tile_table_ids START 2")
    old.execute("CREATE TABLE _trdb.tiles_1 (k0 BIGINT NOT NULL, k1 BIGINT NOT NULL, nnz BIGINT NOT NULL, "
                "v BLOB NOT NULL)")
    tile = np.arange(4, dtype=np.float32).reshape(2, 2)
    old.execute("INSERT INTO _trdb.tiles_1 VALUES (1, 0, 3, ?)", [tile.tobytes()])
    old.execute("""INSERT INTO _trdb.tensors VALUES ('A', '["i", "j"]', 'v', 'float32', '[4, 2]', '[2, 2]',
                   '_trdb.tiles_1', 1, 3)""")
    old.close()
    with trdb.connect(path) as con:
        cur = con.cursor()
        expected = np.zeros((4, 2), np.float32)
        expected[2:] = tile
        np.testing.assert_array_equal(cur.execute("SELECT * FROM A").fetch_tensor(), expected)
        assert describe(cur, "A") == (1, 3 / 8, 0)
        cur.execute("CREATE TENSOR S FROM ? TILE (64, 64)", [scipy.sparse.eye(64, format="csr", dtype=np.float32)])
        assert describe(cur, "S")[2] == 1
        cur.execute("INSERT INTO A VALUES (0, 0, 1.0)")
        assert describe(cur, "A")[0] == 2


# ------------------------------------------------------------ queries over every format combination


MATMUL = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"


@pytest.mark.parametrize("formats", PAIRS, ids="x".join)
def test_matmul(cur, formats):
    a = load(cur, "A", make(formats[0], (ROWS, INNER), seed=3))
    b = load(cur, "B", make(formats[1], (INNER, COLS), seed=4))
    assert_result(cur, MATMUL, a @ b)
    assert_result(cur, "SELECT * FROM EINSUM('ij,jk->ik', A, B)", a @ b)
    assert_result(cur, "SELECT * FROM EINSUM('ij,jk->ki', A, B)", (a @ b).T)
    cur.execute("CREATE TENSOR C AS " + MATMUL)
    present = [tile_pattern(m).astype(int) for m in (a, b)]
    joined = int(((present[0] @ present[1]) > 0).sum())  # keys the join gives: zero products are stored too
    assert describe(cur, "C")[0] == joined
    assert csr_tiles(a @ b) <= describe(cur, "C")[2] <= csr_tiles(a @ b) + joined - nonzero_tiles(a @ b)
    assert_result(cur, "SELECT * FROM C", a @ b)


@pytest.mark.parametrize("formats", PAIRS, ids="x".join)
def test_elementwise_binary(cur, formats):
    a = load(cur, "A", make(formats[0], (ROWS, INNER), seed=5))
    b = load(cur, "B", make(formats[1], (ROWS, INNER), seed=6))
    inner = "FROM A JOIN B ON A.i = B.i AND A.j = B.j"
    full = "FROM A FULL JOIN B ON A.i = B.i AND A.j = B.j"
    keys = "COALESCE(A.i, B.i) AS i, COALESCE(A.j, B.j) AS j"
    assert_result(cur, f"SELECT A.i, A.j, A.v * B.v AS v {inner}", a.multiply(b))
    assert_result(cur, f"SELECT {keys}, A.v + B.v AS v {full}", a + b)
    assert_result(cur, f"SELECT {keys}, A.v - B.v AS v {full}", a - b)
    assert_result(cur, f"SELECT {keys}, A.v * B.v AS v {full}", a.multiply(b))
    assert_result(cur, f"SELECT {keys}, GREATEST(A.v, B.v) AS v {full}", a.maximum(b))
    cur.execute(f"CREATE TENSOR S AS SELECT {keys}, A.v + B.v AS v {full}")
    assert describe(cur, "S")[0] == nonzero_tiles(a + b)


@pytest.mark.parametrize("fmt", FORMATS)
def test_unary_and_scalar_ops(cur, fmt):
    a = load(cur, "A", make(fmt, (ROWS, INNER), seed=7))
    dense = a.toarray()
    cases = {"RELU(A.v)": np.maximum(dense, 0), "-A.v": -dense, "ABS(A.v)": np.abs(dense),
             "SQUARE(A.v)": dense ** 2, "SQRT(ABS(A.v))": np.sqrt(np.abs(dense)), "2.5 * A.v": 2.5 * dense,
             "A.v / 4": dense / 4, "TANH(A.v)": np.tanh(dense), "POWER(A.v, 3)": dense ** 3,
             "CAST(A.v AS float64)": dense, "A.v * 2 - A.v": dense}
    for expression, expected in cases.items():
        assert_result(cur, f"SELECT A.i, A.j, {expression} AS v FROM A", expected)


@pytest.mark.parametrize("fmt", FORMATS)
def test_ops_that_do_not_keep_zeros_see_present_tiles_only(cur, fmt):
    """`+ 1`, EXP, SIGMOID densify a CSR tile; absent tiles stay absent (relational semantics)."""
    a = load(cur, "A", make(fmt, (ROWS, INNER), seed=8))
    present = np.zeros((ROWS, INNER), bool)
    r, c = a.nonzero()
    for bi, bj in set(zip((r // T).tolist(), (c // T).tolist())):
        present[bi * T:(bi + 1) * T, bj * T:(bj + 1) * T] = True
    dense = a.toarray()
    for expression, function in {"A.v + 1": lambda x: x + 1, "EXP(A.v)": np.exp,
                                 "SIGMOID(A.v)": lambda x: 1 / (1 + np.exp(-x))}.items():
        got = cur.execute(f"SELECT A.i, A.j, {expression} AS v FROM A").fetch_tensor(shape=(ROWS, INNER))
        np.testing.assert_allclose(got, np.where(present, function(dense), 0), rtol=1e-5, atol=1e-6)
    cur.execute("CREATE TENSOR E AS SELECT A.i, A.j, A.v + 1 AS v FROM A")
    assert describe(cur, "E")[0] == describe(cur, "A")[0] and describe(cur, "E")[2] == 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_transpose(cur, fmt):
    a = load(cur, "A", make(fmt, (ROWS, INNER), seed=9))
    transpose = "SELECT A.j AS i, A.i AS j, TRANSPOSE(A.v) AS v FROM A"
    assert_result(cur, transpose, a.T)
    assert_result(cur, "SELECT * FROM EINSUM('ij->ji', A)", a.T)
    row_sums = cur.execute("SELECT * FROM EINSUM('ij->i', A)").fetch_tensor(shape=(ROWS,))
    np.testing.assert_allclose(row_sums, a.sum(axis=1), rtol=1e-4, atol=1e-4)
    cur.execute("CREATE TENSOR AT AS " + transpose)
    assert describe(cur, "AT")[2] == describe(cur, "A")[2]
    assert_result(cur, "SELECT P.j AS i, Q.j AS j, SUM(MATMUL(TRANSPOSE(P.v), Q.v)) AS v "
                       "FROM A AS P JOIN A AS Q ON P.i = Q.i GROUP BY P.j, Q.j", a.T @ a)


@pytest.mark.parametrize("fmt", FORMATS)
def test_aggregations(cur, fmt):
    a = load(cur, "A", make(fmt, (ROWS, INNER), seed=10, keep=0.9))
    dense = a.toarray()
    grid = (math.ceil(ROWS / T), math.ceil(INNER / T))
    padded = np.zeros((grid[0] * T, grid[1] * T))
    padded[:ROWS, :INNER] = dense
    blocks = padded.reshape(grid[0], T, grid[1], T).transpose(0, 2, 1, 3)  # [bi, bj] -> tile
    present = np.abs(blocks).sum(axis=(2, 3)) > 0
    # SUM of the tiles of a block row of A's full-width (ragged edge tiles excluded: shapes differ)
    full = [j for j in range(grid[1]) if (j + 1) * T <= INNER]
    query = (f"SELECT A.i, SUM(A.v) AS v, MAX(A.v) AS mx, MIN(A.v) AS mn, AVG(A.v) AS av FROM A "
             f"WHERE A.j < {len(full)} AND A.i < {ROWS // T} GROUP BY A.i")
    for i, total, high, low, mean in cur.execute(query).fetchall():
        tiles = [blocks[i, j] for j in full if present[i, j]]
        np.testing.assert_allclose(total, np.sum(tiles, axis=0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(high, np.max(tiles, axis=0), rtol=1e-5)
        np.testing.assert_allclose(low, np.min(tiles, axis=0), rtol=1e-5)
        np.testing.assert_allclose(mean, np.mean(tiles, axis=0), rtol=1e-5, atol=1e-6)
    rows = cur.execute("SELECT A.i, SUM(REDUCE_SUM(A.v, 1)) AS v FROM A GROUP BY A.i").fetch_tensor(shape=(ROWS,))
    np.testing.assert_allclose(rows, dense.sum(axis=1), rtol=1e-4, atol=1e-4)
    total, squares, peak = cur.execute("SELECT SUM(REDUCE_SUM(A.v)) AS s, SUM(SUMSQ(A.v)) AS q, "
                                       "MAX(REDUCE_MAX(A.v)) AS m FROM A").fetchone()
    assert float(total) == pytest.approx(dense.sum(), rel=1e-4, abs=1e-4)
    assert float(squares) == pytest.approx((dense ** 2).sum(), rel=1e-4)
    assert float(peak) == pytest.approx(dense.max(), rel=1e-6)


def test_sum_mixes_formats_in_one_group(cur):
    """One group sums a CSR tile, a dense tile and another CSR tile (in any order the workers give)."""
    sparse_tile = make("csr", (T, T), seed=11)
    dense_tile = make("dense", (T, T), seed=12)
    stacked = scipy.sparse.vstack([sparse_tile, dense_tile, make("csr", (T, T), seed=13)]).tocsr()
    load(cur, "A", stacked)
    expected = sum(stacked[k * T:(k + 1) * T].toarray().astype(np.float64) for k in range(3))
    np.testing.assert_allclose(cur.execute("SELECT SUM(A.v) AS v FROM A").fetchone()[0], expected, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float64", "int32"])
def test_other_dtypes(cur, dtype):
    a = make("csr", (ROWS, INNER), seed=14)
    a.data = np.rint(a.data * 3) + np.sign(a.data)
    cur.execute(f"CREATE TENSOR A FROM ? TILE ({T}, {T}) DTYPE {dtype}", [a])
    cur.execute(f"CREATE TENSOR B FROM ? TILE ({T}, {T}) DTYPE {dtype}", [a.T.tocsr()])
    assert describe(cur, "A")[2] > 0
    product = cur.execute(MATMUL).fetch_tensor(shape=(ROWS, ROWS))
    assert product.dtype == np.dtype(dtype)
    np.testing.assert_allclose(product, a.toarray().astype(np.float64) @ a.T.toarray(), rtol=1e-6)
    scaled = cur.execute("SELECT A.i, A.j, A.v * 2 AS v FROM A").fetch_sparse()
    assert scaled.dtype == np.dtype(dtype)


# ------------------------------------------------------------ writing statements, RETILE, GRAD


def test_update_insert_and_delete_on_csr_tiles(cur):
    a = load(cur, "A", make("mixed", (ROWS, INNER), seed=15))
    tuples, _, csr = describe(cur, "A")
    cur.execute("UPDATE A SET v = A.v * 3")
    assert describe(cur, "A")[::2] == (tuples, csr)
    assert_result(cur, "SELECT * FROM A", 3 * a)
    cur.execute("UPDATE A SET v = A.v + 1 WHERE A.i = 0")  # row 0's tiles fill in: dense now
    assert describe(cur, "A")[2] == csr - csr_tiles(a[:T])
    cur.execute("DELETE FROM A WHERE A.i = 0")
    cur.execute("INSERT INTO A SELECT B.i, B.j, B.v FROM (SELECT A.i, A.j, A.v * 0.5 AS v FROM A WHERE A.i = 1) "
                "AS B WHERE B.i = 99")  # nothing
    cur.execute("CREATE TENSOR H AS SELECT A.i, A.j, A.v * 0.5 AS v FROM A")
    expected = 1.5 * a.toarray()
    expected[:T] = 0
    assert_result(cur, "SELECT * FROM H", expected)
    assert describe(cur, "H")[2] == csr_tiles(scipy.sparse.csr_array(expected))


@pytest.mark.parametrize("new_tile", [(7, 9), (ROWS, INNER), (32, 5)])
def test_retile_keeps_sparse_tiles_sparse(cur, new_tile):
    a = load(cur, "A", make("mixed", (ROWS, INNER), seed=16))
    query = f"SELECT * FROM RETILE(A, ({new_tile[0]}, {new_tile[1]}))"
    assert_result(cur, query, a)
    cur.execute(f"CREATE TENSOR R AS {query}")
    assert describe(cur, "R")[0] == nonzero_tiles(a, new_tile)
    assert describe(cur, "R")[2] == csr_tiles(a, new_tile)


def test_gradient_through_a_csr_operand(cur):
    """d/dW sum((A W)^2) = 2 A^T (A W), with A stored as CSR tiles and W dense."""
    a = load(cur, "A", make("csr", (ROWS, INNER), seed=17))
    w = np.random.default_rng(18).standard_normal((INNER, 8)).astype(np.float32)
    cur.execute(f"CREATE TENSOR W FROM ? TILE ({T}, 8)", [w])
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(P.v)) AS v FROM "
                "(SELECT A.i, W.j, SUM(MATMUL(A.v, W.v)) AS v FROM A JOIN W ON A.j = W.i GROUP BY A.i, W.j) AS P")
    grad = cur.execute("SELECT * FROM GRAD(loss, W)").fetch_tensor(shape=(INNER, 8))
    expected = 2 * a.T @ (a @ w.astype(np.float64))
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-4)
    grad_a = cur.execute("SELECT * FROM GRAD(loss, A)").fetch_tensor(shape=(ROWS, INNER))
    present = cur.execute("SELECT A.i, A.j, ONES_LIKE(A.v) AS v FROM A").fetch_tensor(shape=(ROWS, INNER))
    dense_grad = 2 * (a @ w.astype(np.float64)) @ w.T
    np.testing.assert_allclose(grad_a, dense_grad * present, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------ large sparse tiles are never densified


def test_large_sparse_tiles_are_never_densified(con):
    """A 40,000^2 matrix in 20,000^2 tiles (1.6 GB each if dense) loads, multiplies and fetches in MBs."""
    cur = con.cursor()
    n, t, count = 40_000, 20_000, 5_000
    rng = np.random.default_rng(19)
    edges = pa.table({"r": rng.integers(0, n, count), "c": rng.integers(0, n, count),
                      "w": rng.uniform(0.5, 1.5, count).astype(np.float32)})
    x = rng.standard_normal((n, 4)).astype(np.float32)
    matrix = scipy.sparse.csr_array((edges["w"].to_numpy(), (edges["r"].to_numpy(), edges["c"].to_numpy())),
                                    shape=(n, n), dtype=np.float64)
    tracemalloc.start()
    try:
        cur.execute(f"CREATE TENSOR A FROM COO ? (r, c, w) SHAPE ({n}, {n}) TILE ({t}, {t})", [edges])
        cur.execute(f"CREATE TENSOR B FROM ? TILE ({t}, {t})", [matrix.T.tocsr()])
        cur.execute(f"CREATE TENSOR X FROM ? TILE ({t}, 4)", [x])
        product = cur.execute("SELECT A.i, X.j, SUM(MATMUL(A.v, X.v)) AS v FROM A JOIN X ON A.j = X.i "
                              "GROUP BY A.i, X.j").fetch_tensor(shape=(n, 4))
        fetched = cur.execute("SELECT * FROM A").fetch_sparse()
        propagated = cur.execute("SELECT * FROM EINSUM('ij,jk->ik', A, X)").fetch_tensor(shape=(n, 4))
        total = cur.execute("SELECT COALESCE(A.i, B.j) AS i, COALESCE(A.j, B.i) AS j, A.v + B.v AS v "
                            "FROM A FULL JOIN (SELECT B.j AS i, B.i AS j, TRANSPOSE(B.v) AS v FROM B) AS B "
                            "ON A.i = B.i AND A.j = B.j").fetch_sparse()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100e6, f"peak {peak / 1e6:.0f} MB: a tile was densified"
    assert describe(cur, "A")[0] == describe(cur, "A")[2] == 4
    np.testing.assert_allclose(product, matrix @ x, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(propagated, matrix @ x, rtol=1e-4, atol=1e-4)
    assert abs(fetched - matrix).max() < 1e-6
    assert abs(total - 2 * matrix).max() < 1e-5


# ------------------------------------------------------------ the codec and FROM COO


@pytest.mark.parametrize("dtype", ["float32", "float64", "bool", "int64"])
def test_codec_round_trips_mixed_formats_with_aligned_sections(dtype, monkeypatch):
    """Dense and CSR tiles (int32 and int64 indices) back to back in one Arrow column decode as written."""
    from trdb.storage import tile_codec

    rng = np.random.default_rng(20)
    shapes = [(5, 3), (7, 9), (1, 4), (6, 6), (3, 5)]
    tiles = []
    for number, shape in enumerate(shapes):
        values = (rng.random(shape) < 0.2) * rng.integers(1, 5, shape)
        values = values.astype(dtype)
        tiles.append(scipy.sparse.csr_array(values) if number % 2 else values)
    wide = iter([False, True])  # the second CSR tile takes int64 indices
    real = tile_codec.tile_format
    monkeypatch.setattr(tile_codec, "tile_format",
                        lambda t: (tile_codec.CSR64 if next(wide) else tile_codec.CSR32) if is_sparse(t) else real(t))
    blobs, formats = tile_codec.encode_tiles(tiles, np.dtype(dtype))
    assert formats.tolist() == [DENSE, CSR32, DENSE, tile_codec.CSR64, DENSE]
    assert all(len(blob.as_py()) % 8 == 0 for blob, f in zip(blobs, formats) if f != DENSE)
    nnz = np.array([t.nnz if is_sparse(t) else 0 for t in tiles])
    decoded = tile_codec.decode_tiles(pa.chunked_array([blobs]), np.dtype(dtype), shapes, formats, nnz)
    for original, tile in zip(tiles, decoded):
        assert is_sparse(tile) == is_sparse(original) and tile.dtype == np.dtype(dtype)
        expected = original.toarray() if is_sparse(original) else original
        np.testing.assert_array_equal(tile.toarray() if is_sparse(tile) else tile, expected)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "big-endian", "other dtype"])
def test_codec_round_trips_one_dense_tile_whatever_its_layout(layout):
    """One dense tile is its own blob where its bytes are the stored ones (no copy); any other layout is copied."""
    from trdb.storage import tile_codec

    values = np.random.default_rng(21).standard_normal((6, 4)).astype(np.float32)
    tile = {"contiguous": values, "transposed": np.ascontiguousarray(values.T).T,
            "big-endian": values.astype(">f4"), "other dtype": values.astype(np.float64)}[layout]
    blobs, formats = tile_codec.encode_tiles([tile], np.dtype(np.float32))
    assert formats.tolist() == [DENSE] and len(blobs[0].as_py()) == values.nbytes
    (decoded,) = tile_codec.decode_tiles(pa.chunked_array([blobs]), np.dtype(np.float32), [values.shape])
    np.testing.assert_array_equal(decoded, values)


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16"])
def test_from_coo_builds_csr_and_dense_tiles_in_small_chunks(cur, monkeypatch, dtype):
    """Tiles under and over the threshold, several per insert chunk, ragged edges; duplicates summed.
    float16 tiles are all dense (scipy.sparse has no float16)."""
    from trdb.ingest import tiling

    monkeypatch.setattr(tiling, "CHUNK_BYTES", 300)
    rng = np.random.default_rng(21)
    dense_part = [(r, c) for r in range(10) for c in range(10)]  # tile (0, 0) full: dense
    sparse_part = [tuple(x) for x in rng.integers(10, 57, (60, 2))]  # the rest: a few per tile, CSR
    rows, cols = map(np.array, zip(*(dense_part + sparse_part + sparse_part[:5])))
    values = rng.integers(1, 4, len(rows))
    table = pa.table({"r": rows, "c": cols, "v": values})
    cur.execute(f"CREATE TENSOR A FROM COO ? (r, c, v) SHAPE (57, 57) TILE (10, 10) DTYPE {dtype}", [table])
    expected = np.zeros((57, 57), np.int64)
    np.add.at(expected, (rows, cols), values)
    expected = expected.astype(dtype)
    got = cur.execute("SELECT * FROM A").fetch_tensor(shape=(57, 57))
    np.testing.assert_array_equal(got, expected)
    tuples, density, csr = describe(cur, "A")
    assert tuples == nonzero_tiles(expected, (10, 10))
    if dtype == "float16":
        assert csr == 0
        assert_result(cur, "SELECT A.i, A.j, CAST(A.v AS float32) * 2 AS v FROM A", 2 * expected.astype(np.float64))
        return
    assert csr == csr_tiles(expected, (10, 10)) and 0 < csr < tuples
    assert density == pytest.approx(np.count_nonzero(expected) / 57 ** 2, abs=1e-6)


def test_from_coo_of_a_scipy_matrix_and_from_a_scipy_parameter_agree(cur):
    matrix = make("mixed", (ROWS, INNER), seed=22)
    coo = matrix.tocoo()
    cur.execute(f"CREATE TENSOR A FROM COO ? (r, c, v) SHAPE ({ROWS}, {INNER}) TILE ({T}, {T})", [coo])
    cur.execute(f"CREATE TENSOR B FROM ? TILE ({T}, {T})", [coo])
    cur.execute(f"CREATE TENSOR C (i) FROM ? TILE ({T}, {INNER})", [matrix])  # one key: row strips
    assert describe(cur, "A") == describe(cur, "B")
    assert_result(cur, "SELECT * FROM A", matrix)
    assert_result(cur, "SELECT * FROM B", matrix)
    np.testing.assert_array_equal(cur.execute("SELECT * FROM C").fetch_tensor(shape=(ROWS, INNER)),
                                  matrix.toarray())


@pytest.mark.parametrize("seed", range(40))
def test_a_batch_of_dense_tiles_encodes_as_the_per_tile_path(seed):
    """encode_dense_batch (one buffer for a batch of dense tiles, edge tiles among them, or the buffer they lie
    in back to back) gives the same blobs, formats and non-zeros as stored_form and encode_tiles tile by tile,
    or declines the batch."""
    from trdb.kernels.sparse import stored_form
    from trdb.storage import tile_codec

    rng = np.random.default_rng(seed)
    dtype = np.dtype(rng.choice(["float32", "float64", "int64", "bool", "float16"]))
    shape = [(), (5,), (4, 3), (3, 2, 2), (6, 6)][rng.integers(5)]
    tiles = []
    for _ in range(rng.integers(1, 7)):
        density = rng.choice([0.0, 0.05, 0.2, 0.6, 1.0])
        values = rng.standard_normal(shape) * (rng.random(shape) < density)
        tile = np.asarray(values).astype(dtype)
        if rng.random() < 0.2:
            tile = np.asfortranarray(tile)
        if rng.random() < 0.15:
            tile = tile.astype(np.float64 if dtype != np.float64 else np.float32)  # not the stored dtype
        tiles.append(tile)
    if rng.random() < 0.7 and len({(t.shape, t.dtype) for t in tiles}) == 1:
        buffer = np.stack(tiles)  # views of one buffer: back to back (written with no copy), or not in order
        order = [list(range(len(tiles))), rng.permutation(len(tiles)).tolist(), [0] * len(tiles)][rng.integers(3)]
        tiles = [buffer[i] for i in order]
    if rng.random() < 0.3 and len(tiles) > 1 and len(shape):
        tiles[-1] = tiles[-1][tuple(slice(0, max(1, n - 1)) for n in tiles[-1].shape)]  # an edge tile
    forms = [stored_form(t) for t in tiles]
    nonzeros = np.array([nnz for _, nnz in forms], dtype=np.int64)
    blobs, formats = tile_codec.encode_tiles([form for form, _ in forms], dtype)
    batch = tile_codec.encode_dense_batch(tiles, dtype)
    uniform = len(tiles) > 1 and all(t.dtype == dtype for t in tiles)
    if batch is None:
        assert not uniform or (formats != DENSE).any()
        return
    assert uniform and (formats == DENSE).all()
    batch_blobs, batch_formats, batch_nonzeros = batch
    assert batch_nonzeros.tolist() == nonzeros.tolist()
    assert batch_formats.tolist() == formats.tolist()
    assert batch_blobs.to_pylist() == blobs.to_pylist()
