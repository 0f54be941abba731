"""Sparse results (issue 4, items 1 and 2): absent tiles are zeros, whatever the tiles' format.

Oracles are scipy.sparse and numpy (float64). Data comes in two kinds:

- block-sparse: whole tiles absent, the present ones dense (loaded from a scipy.sparse matrix through
  FROM ?: sparse on purpose, since a dense array's zero tiles are values and stay present);
- element-sparse: random sparse entries (loaded from scipy.sparse through FROM ? and through
  FROM COO from a pyarrow Table), so most tiles are partly filled (6%: stored as CSR tiles) and
  some are absent. test_sparse_tiles.py forces every combination of tile formats.

Each result is read back both with fetch_sparse() (scipy CSR) and fetch_tensor() (dense). Loaded
sparse tensors store exactly their non-zero tiles; results materialized with CREATE TENSOR ... AS
store the tuples the query gives (zeros are values: a joined pair that multiplies to zero is stored),
and DESCRIBE / SHOW TENSORS report the density nnz / size.
"""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
import scipy.sparse

# (rows, inner, cols) of A (rows x inner) and B (inner x cols), and a tile size t for every axis:
# ragged edge tiles, fully relational tiles (t = 1, COO) and one tile holding the whole matrix.
TILINGS = {"ragged": ((37, 29, 23), 8), "coo": ((9, 7, 6), 1), "whole": ((30, 30, 30), 30)}
KINDS = ("block", "scipy", "coo")


def nonzero_tiles(matrix, tile) -> int:
    dense = matrix.toarray() if scipy.sparse.issparse(matrix) else np.asarray(matrix)
    rows, cols = np.nonzero(dense)
    return len({(r // tile[0], c // tile[1]) for r, c in zip(rows.tolist(), cols.tolist())})


def tile_pattern(matrix, tile) -> np.ndarray:
    """Which tiles of `matrix` hold a non-zero (the present tiles of a sparse tensor loaded from it)."""
    dense = matrix.toarray() if scipy.sparse.issparse(matrix) else np.asarray(matrix)
    grid = [math.ceil(n / t) for n, t in zip(dense.shape, tile)]
    pattern = np.zeros(grid, dtype=bool)
    rows, cols = np.nonzero(dense)
    pattern[rows // tile[0], cols // tile[1]] = True
    return pattern


def product_tiles(a, b, t) -> int:
    """Tuples of A x B by join + SUM: the output keys where some present tile of A meets one of B."""
    return int(((tile_pattern(a, (t, t)).astype(int) @ tile_pattern(b, (t, t)).astype(int)) > 0).sum())


def block_sparse(shape, t, seed, keep=0.35):
    """A dense matrix whose t x t tiles are each kept (random values) or zero; at least one kept."""
    rng = np.random.default_rng(seed)
    grid = [math.ceil(n / t) for n in shape]
    mask = rng.random(grid) < keep
    mask.flat[rng.integers(mask.size)] = True
    dense = rng.standard_normal(shape).astype(np.float32)
    dense *= np.kron(mask, np.ones((t, t), dtype=bool))[:shape[0], :shape[1]]
    return scipy.sparse.csr_matrix(dense)


def element_sparse(shape, seed, density=0.06):
    rng = np.random.default_rng(seed)
    m = scipy.sparse.random(*shape, density=density, format="csr", random_state=rng, dtype=np.float32)
    m.data = rng.standard_normal(m.nnz).astype(np.float32)  # signed values, no accidental zeros
    m.data[m.data == 0] = 1.0
    return m


def load(cur, name, kind, matrix, t):
    """Create tensor `name` from `matrix` the way `kind` says; returns the scipy oracle (CSR, float64)."""
    if kind in ("block", "scipy"):
        cur.execute(f"CREATE TENSOR {name} FROM ? TILE ({t}, {t})", [matrix])
    else:
        coo = matrix.tocoo()
        table = pa.table({"r": coo.row.astype(np.int64), "c": coo.col.astype(np.int64), "x": coo.data})
        cur.execute(f"CREATE TENSOR {name} FROM COO ? (r, c, x) SHAPE ({matrix.shape[0]}, {matrix.shape[1]}) "
                    f"TILE ({t}, {t})", [table])
    return scipy.sparse.csr_matrix(matrix, dtype=np.float64)


def make(kind, shape, t, seed):
    return block_sparse(shape, t, seed) if kind == "block" else element_sparse(shape, seed)


def stored_tuples(cur, name) -> int:
    return cur.execute(f"SELECT COUNT(*) FROM {name}").fetchone()[0]


def assert_result(cur, query, expected, params=()):
    """The query's fetch_sparse() and fetch_tensor() both equal the scipy oracle `expected`."""
    expected = scipy.sparse.csr_matrix(expected)
    expected.eliminate_zeros()
    got = cur.execute(query, list(params)).fetch_sparse()
    assert scipy.sparse.issparse(got) and got.format == "csr"
    assert got.shape == expected.shape
    np.testing.assert_allclose(got.toarray(), expected.toarray(), rtol=1e-5, atol=1e-5)
    assert got.nnz == expected.nnz  # zeros inside present tiles are not stored either
    dense = cur.execute(query, list(params)).fetch_tensor(shape=expected.shape)
    np.testing.assert_allclose(dense, expected.toarray(), rtol=1e-5, atol=1e-5)


@pytest.fixture(params=list(TILINGS))
def tiling(request):
    return TILINGS[request.param]


# ------------------------------------------------------------ storage: tuples and density


@pytest.mark.parametrize("kind", KINDS)
def test_stored_tuples_are_the_nonzero_tiles_and_describe_shows_density(cur, kind, tiling):
    (rows, inner, _), t = tiling
    matrix = make(kind, (rows, inner), t, seed=1)
    oracle = load(cur, "A", kind, matrix, t)
    assert stored_tuples(cur, "A") == nonzero_tiles(oracle, (t, t))
    assert stored_tuples(cur, "A") < math.ceil(rows / t) * math.ceil(inner / t) or t == max(rows, inner)
    density = oracle.nnz / (rows * inner)
    value_row = [row for row in cur.execute("DESCRIBE A").fetchall() if row[2] == "value"][0]
    assert value_row[5] == nonzero_tiles(oracle, (t, t))
    assert value_row[6] == pytest.approx(density, abs=1e-6)
    shown = [row for row in cur.execute("SHOW TENSORS").fetchall() if row[0] == "A"][0]
    assert shown[5] == value_row[5] and shown[6] == value_row[6]
    assert_result(cur, "SELECT * FROM A", oracle)


def test_absent_tiles_cost_no_tuples(cur):
    """A 1000 x 1000 matrix with three non-zeros in three tiles stores three tuples."""
    m = scipy.sparse.coo_matrix(([1.0, -2.0, 3.5], ([0, 500, 999], [999, 3, 0])), shape=(1000, 1000))
    oracle = load(cur, "A", "scipy", m.tocsr(), 100)
    assert stored_tuples(cur, "A") == 3
    row = [r for r in cur.execute("DESCRIBE A").fetchall() if r[2] == "value"][0]
    assert row[6] == pytest.approx(3 / 1e6, abs=1e-6)
    assert_result(cur, "SELECT * FROM A", oracle)


# ------------------------------------------------------------ matmul


MATMUL = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"


@pytest.mark.parametrize("kinds", [("block", "block"), ("scipy", "coo"), ("coo", "block")])
def test_matmul(cur, kinds, tiling):
    (rows, inner, cols), t = tiling
    a = load(cur, "A", kinds[0], make(kinds[0], (rows, inner), t, seed=2), t)
    b = load(cur, "B", kinds[1], make(kinds[1], (inner, cols), t, seed=3), t)
    expected = a @ b
    assert_result(cur, MATMUL, expected)
    # materialized, the product stores every tuple the join gives, one that multiplies to zero too
    cur.execute("CREATE TENSOR C AS " + MATMUL)
    assert stored_tuples(cur, "C") == product_tiles(a, b, t)
    assert_result(cur, "SELECT * FROM C", expected)


def test_matmul_of_disjoint_supports_is_empty(cur):
    """A's non-zero columns never meet B's non-zero rows: every joined pair multiplies to zeros."""
    a = scipy.sparse.coo_matrix(([1.0, 2.0], ([0, 5], [0, 2])), shape=(8, 8)).tocsr()
    b = scipy.sparse.coo_matrix(([3.0, 4.0], ([1, 3], [4, 7])), shape=(8, 8)).tocsr()
    load(cur, "A", "scipy", a, 4)
    load(cur, "B", "scipy", b, 4)
    assert_result(cur, MATMUL, scipy.sparse.csr_matrix((8, 8)))
    cur.execute("CREATE TENSOR C AS " + MATMUL)
    assert stored_tuples(cur, "C") == product_tiles(a, b, 4) == 2  # tiles (0, 1), (1, 1): zeros are values
    assert_result(cur, "SELECT * FROM C", scipy.sparse.csr_matrix((8, 8)))


# ------------------------------------------------------------ elementwise


@pytest.mark.parametrize("kinds", [("block", "block"), ("scipy", "coo"), ("coo", "block")])
def test_elementwise_product_and_sum(cur, kinds, tiling):
    (rows, inner, _), t = tiling
    a = load(cur, "A", kinds[0], make(kinds[0], (rows, inner), t, seed=4), t)
    b = load(cur, "B", kinds[1], make(kinds[1], (rows, inner), t, seed=5), t)
    product = "SELECT A.i, A.j, A.v * B.v AS v FROM A JOIN B ON A.i = B.i AND A.j = B.j"
    assert_result(cur, product, a.multiply(b))
    total = ("SELECT COALESCE(A.i, B.i) AS i, COALESCE(A.j, B.j) AS j, A.v + B.v AS v "
             "FROM A FULL JOIN B ON A.i = B.i AND A.j = B.j")
    assert_result(cur, total, a + b)
    # `*` over a FULL JOIN: one-sided keys multiply by a zero tile, so they come out as zeros
    outer_product = ("SELECT COALESCE(A.i, B.i) AS i, COALESCE(A.j, B.j) AS j, A.v * B.v AS v "
                     "FROM A FULL JOIN B ON A.i = B.i AND A.j = B.j")
    assert_result(cur, outer_product, a.multiply(b))
    assert_result(cur, "SELECT A.i, A.j, 2.5 * A.v - A.v AS v FROM A", 1.5 * a)
    assert_result(cur, "SELECT A.i, A.j, RELU(A.v) AS v FROM A", a.maximum(0))
    pa_, pb_ = tile_pattern(a, (t, t)), tile_pattern(b, (t, t))
    cur.execute("CREATE TENSOR S AS " + total)
    assert stored_tuples(cur, "S") == int((pa_ | pb_).sum())
    cur.execute("CREATE TENSOR P AS " + product)
    assert stored_tuples(cur, "P") == int((pa_ & pb_).sum())
    cur.execute("CREATE TENSOR PO AS " + outer_product)  # every key of the FULL JOIN, one-sided ones as zeros
    assert stored_tuples(cur, "PO") == int((pa_ | pb_).sum())
    assert_result(cur, "SELECT * FROM PO", a.multiply(b))


def test_sum_that_cancels_is_stored_as_zeros(cur):
    """A + (-A) over a FULL JOIN gives all-zero tiles; materialized, they are stored (zeros are values)."""
    a = load(cur, "A", "block", block_sparse((20, 20), 5, seed=6), 5)
    load(cur, "B", "block", -a.astype(np.float32), 5)
    total = ("SELECT COALESCE(A.i, B.i) AS i, COALESCE(A.j, B.j) AS j, A.v + B.v AS v "
             "FROM A FULL JOIN B ON A.i = B.i AND A.j = B.j")
    assert_result(cur, total, scipy.sparse.csr_matrix((20, 20)))
    cur.execute("CREATE TENSOR S AS " + total)
    assert stored_tuples(cur, "S") == stored_tuples(cur, "A")
    assert_result(cur, "SELECT * FROM S", scipy.sparse.csr_matrix((20, 20)))


# ------------------------------------------------------------ transposes


@pytest.mark.parametrize("kind", KINDS)
def test_transpose(cur, kind, tiling):
    (rows, inner, _), t = tiling
    a = load(cur, "A", kind, make(kind, (rows, inner), t, seed=7), t)
    transpose = "SELECT A.j AS i, A.i AS j, TRANSPOSE(A.v) AS v FROM A"
    assert_result(cur, transpose, a.T)
    cur.execute("CREATE TENSOR T AS " + transpose)
    assert stored_tuples(cur, "T") == stored_tuples(cur, "A")
    # A^T A through the transposed tensor and through a join on A's row keys agree with scipy
    gram = a.T @ a
    assert_result(cur, "SELECT T.i, A.j, SUM(MATMUL(T.v, A.v)) AS v FROM T JOIN A ON T.j = A.i GROUP BY T.i, A.j",
                  gram)
    assert_result(cur, "SELECT P.j AS i, Q.j AS j, SUM(MATMUL(TRANSPOSE(P.v), Q.v)) AS v "
                       "FROM A AS P JOIN A AS Q ON P.i = Q.i GROUP BY P.j, Q.j", gram)


# ------------------------------------------------------------ aggregations


@pytest.mark.parametrize("kind", KINDS)
def test_aggregations(cur, kind, tiling):
    (rows, inner, _), t = tiling
    a = load(cur, "A", kind, make(kind, (rows, inner), t, seed=8), t)
    dense = a.toarray()
    row_sums = cur.execute("SELECT A.i, SUM(REDUCE_SUM(A.v, 1)) AS v FROM A GROUP BY A.i").fetch_tensor(shape=(rows,))
    np.testing.assert_allclose(row_sums, dense.sum(axis=1), rtol=1e-5, atol=1e-5)
    col_sums = cur.execute("SELECT A.j, SUM(REDUCE_SUM(A.v, 0)) AS v FROM A GROUP BY A.j").fetch_tensor(shape=(inner,))
    np.testing.assert_allclose(col_sums, dense.sum(axis=0), rtol=1e-5, atol=1e-5)
    total, squares = cur.execute("SELECT SUM(REDUCE_SUM(A.v)) AS s, SUM(SUMSQ(A.v)) AS q FROM A").fetchone()
    assert float(total) == pytest.approx(dense.sum(), rel=1e-4, abs=1e-4)
    assert float(squares) == pytest.approx(a.multiply(a).sum(), rel=1e-4)
    # tiles per block row: the relational view of the sparsity pattern
    counts = dict(cur.execute("SELECT A.i, COUNT(*) AS n FROM A GROUP BY A.i").fetchall())
    grid_rows = math.ceil(rows / t)
    pattern = np.zeros((grid_rows, math.ceil(inner / t)), dtype=bool)
    r, c = a.nonzero()
    pattern[r // t, c // t] = True
    assert counts == {i: int(n) for i, n in enumerate(pattern.sum(axis=1)) if n}


def test_block_sums_of_a_block_sparse_matrix(cur):
    """SUM over a rekeyed group: 2 x 2 super-blocks of tiles, absent tiles contributing nothing."""
    a = load(cur, "A", "block", block_sparse((32, 32), 4, seed=9, keep=0.2), 4)
    query = "SELECT A.i // 2 AS i, A.j // 2 AS j, SUM(A.v) AS v FROM A GROUP BY A.i // 2, A.j // 2"
    got = cur.execute(query).fetch_tensor(shape=(16, 16))
    expected = a.toarray().reshape(4, 2, 4, 4, 2, 4).sum(axis=(1, 4)).reshape(16, 16)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
