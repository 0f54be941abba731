"""Query results against numpy: matmul, transpose, elementwise, row sums, filters, outer joins, einsum."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

RNG = np.random.default_rng(1234)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


@pytest.fixture
def ab(cur):
    A, B = rand(300, 200), rand(200, 100)
    cur.execute("CREATE TENSOR A FROM ? TILE (128, 64)", [A])
    cur.execute("CREATE TENSOR B FROM ? TILE (64, 48)", [B])
    return A, B


def load_sparse(cur, name, array, tile):
    """A tensor whose all-zero tiles are absent: sparse on purpose (a dense load keeps them, zeros are values)."""
    cur.execute(f"CREATE TENSOR {name} FROM ? TILE {tile}", [scipy.sparse.csr_matrix(array)])


def close(actual, expected, rtol=1e-4):
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


def test_matmul_with_ragged_tiles(cur, ab):
    A, B = ab
    cur.execute("SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j")
    C = cur.fetch_tensor()
    assert C.shape == (300, 100) and C.dtype == np.float32
    close(C, A @ B)


def test_matmul_written_as_from_list_with_where(cur, ab):
    A, B = ab
    cur.execute("SELECT A.i, B.j, SUM(MATRIX_MULTIPLY(A.v, B.v)) FROM A, B WHERE A.j = B.i GROUP BY A.i, B.j")
    close(cur.fetch_tensor(), A @ B)


def test_transpose_by_rekey(cur, ab):
    A, _ = ab
    cur.execute("SELECT A.j AS i, A.i AS j, TRANSPOSE(A.v) AS v FROM A")
    np.testing.assert_array_equal(cur.fetch_tensor(), A.T)


def test_elementwise_with_scalars(cur, ab):
    A, _ = ab
    cur.execute("SELECT A.i, A.j, SIGMOID(A.v * 2 + 1) - A.v / 4 AS v FROM A")
    close(cur.fetch_tensor(), 1 / (1 + np.exp(-(A * 2 + 1))) - A / 4)


def test_row_sums_by_group_by(cur, ab):
    A, _ = ab
    cur.execute("SELECT A.i, SUM(REDUCE_SUM(A.v, 1)) AS v FROM A GROUP BY A.i")
    close(cur.fetch_tensor(), A.sum(axis=1))


def test_diagonal_filter(cur):
    M = rand(100, 100)
    cur.execute("CREATE TENSOR M FROM ? TILE (30, 30)", [M])
    cur.execute("SELECT M.i, M.j, M.v FROM M WHERE M.i = M.j")
    expected = np.zeros_like(M)
    for k in range(4):
        block = slice(30 * k, 30 * (k + 1))
        expected[block, block] = M[block, block]
    np.testing.assert_array_equal(cur.fetch_tensor(shape=(100, 100)), expected)


def test_full_join_sparse_addition(cur):
    X, Y = rand(40, 40), rand(40, 40)
    X[:20, :] = 0  # tiles (0, *) absent in X
    Y[:, 20:] = 0  # tiles (*, 1) absent in Y
    load_sparse(cur, "X", X, (20, 20))
    load_sparse(cur, "Y", Y, (20, 20))
    cur.execute("SELECT COUNT(*) FROM X")
    assert cur.fetchone() == (2,)
    cur.execute("SELECT COALESCE(X.i, Y.i) AS i, COALESCE(X.j, Y.j) AS j, X.v + Y.v AS v "
                "FROM X FULL JOIN Y ON X.i = Y.i AND X.j = Y.j")
    rows = cur.fetchall()
    assert len(rows) == 3  # the union of the present tiles; (0, 1) is absent in both
    cur.execute("SELECT COALESCE(X.i, Y.i) AS i, COALESCE(X.j, Y.j) AS j, X.v + Y.v AS v "
                "FROM X FULL JOIN Y ON X.i = Y.i AND X.j = Y.j")
    close(cur.fetch_tensor(), X + Y)


def test_full_join_zero_tiles_take_the_edge_shape(cur):
    X, Y = rand(50, 50), rand(50, 50)
    X[40:, :] = 0  # X lacks its ragged bottom row of tiles
    load_sparse(cur, "X", X, (20, 20))
    assert cur.execute("SELECT COUNT(*) FROM X").fetchone() == (6,)
    cur.execute("CREATE TENSOR Y FROM ? TILE (20, 20)", [Y])
    cur.execute("SELECT COALESCE(X.i, Y.i) AS i, COALESCE(X.j, Y.j) AS j, X.v - Y.v AS v "
                "FROM X FULL JOIN Y ON X.i = Y.i AND X.j = Y.j")
    close(cur.fetch_tensor(), X - Y)


def test_left_join_keeps_left_tuples(cur):
    X, Y = rand(40, 20), rand(40, 20)
    Y[20:, :] = 0  # Y's tile (1, 0) is absent
    cur.execute("CREATE TENSOR X FROM ? TILE (20, 20)", [X])
    load_sparse(cur, "Y", Y, (20, 20))
    assert cur.execute("SELECT COUNT(*) FROM Y").fetchone() == (1,)
    cur.execute("SELECT X.i, X.j, X.v * 2 + Y.v AS v FROM X LEFT JOIN Y ON X.i = Y.i AND X.j = Y.j")
    close(cur.fetch_tensor(), X * 2 + Y)


def test_batched_einsum_kernel_3d(cur):
    P, Q = rand(6, 10, 12), rand(6, 12, 7)
    cur.execute("CREATE TENSOR P FROM ? TILE (4, 10, 12)", [P])
    cur.execute("CREATE TENSOR Q FROM ? TILE (4, 12, 7)", [Q])
    cur.execute("SELECT P.i, P.j, P.k, EINSUM('bij,bjk->bik', P.v, Q.v) AS v FROM P JOIN Q ON P.i = Q.i "
                "AND P.j = Q.j AND P.k = Q.k")
    close(cur.fetch_tensor(), np.einsum("bij,bjk->bik", P, Q))


def test_scalar_total_of_sum_of_squares(cur, ab):
    A, _ = ab
    cur.execute("SELECT SUM(SUMSQ(A.v)) AS total FROM A")
    (total,) = cur.fetchone()
    assert total.shape == ()
    assert abs(float(total) - float((A.astype(np.float64) ** 2).sum())) < 1e-4 * float((A ** 2).sum())


@pytest.mark.parametrize("shape,tile", [((7,), (3,)), ((5, 9), (2, 4)), ((4, 6, 5), (3, 4, 2)),
                                        ((3, 4, 5, 6), (2, 3, 2, 5))])
def test_roundtrip_and_elementwise_1d_to_4d(cur, shape, tile):
    T = rand(*shape)
    cur.execute(f"CREATE TENSOR T FROM ? TILE {tile if len(tile) > 1 else f'({tile[0]})'}", [T])
    keys = ", ".join(f"T.{k}" for k in "ijkl"[:len(shape)])
    cur.execute(f"SELECT {keys}, ABS(T.v) * 3 AS v FROM T")
    close(cur.fetch_tensor(), np.abs(T) * 3)


def test_avg_min_max_count_over_tiles(cur):
    T = rand(40, 10)
    cur.execute("CREATE TENSOR T FROM ? TILE (10, 10)", [T])
    cur.execute("SELECT T.j, AVG(T.v) AS a, MIN(T.v) AS lo, MAX(T.v) AS hi, COUNT(*) AS n FROM T GROUP BY T.j")
    (j, avg, lo, hi, n), = cur.fetchall()
    blocks = T.reshape(4, 10, 10)
    assert (j, n) == (0, 4)
    close(avg, blocks.mean(0))
    np.testing.assert_array_equal(lo, blocks.min(0))
    np.testing.assert_array_equal(hi, blocks.max(0))


def test_order_by_limit_and_union_all(cur):
    T = rand(40, 10)
    cur.execute("CREATE TENSOR T FROM ? TILE (10, 10)", [T])
    cur.execute("SELECT T.i FROM T ORDER BY i DESC LIMIT 2")
    assert cur.fetchall() == [(3,), (2,)]
    cur.execute("SELECT T.i, T.v FROM T WHERE T.i = 0 UNION ALL SELECT T.i + 10, T.v * 0 + 1 FROM T "
                "WHERE T.i = 1 ORDER BY 1")
    rows = cur.fetchall()
    assert [r[0] for r in rows] == [0, 11]
    np.testing.assert_array_equal(rows[1][1], np.ones((10, 10), np.float32))


def test_with_and_subquery(cur, ab):
    A, B = ab
    cur.execute("WITH C AS (SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i "
                "GROUP BY A.i, B.j) SELECT s.i, s.j, RELU(s.v) AS v FROM (SELECT C.i, C.j, C.v FROM C) AS s")
    close(cur.fetch_tensor(), np.maximum(A @ B, 0))


def test_view_is_lazy_and_composes(cur):
    T = rand(20, 20)
    cur.execute("CREATE TENSOR T FROM ? TILE (10, 10)", [T])
    cur.execute("CREATE VIEW doubled AS SELECT T.i, T.j, T.v * 2 AS v FROM T")
    cur.execute("UPDATE T SET v = T.v + 1")
    cur.execute("SELECT d.i, d.j, d.v FROM doubled AS d")
    close(cur.fetch_tensor(), (T + 1) * 2)


def test_ordinary_table_joins_tensor_on_integer_column(cur):
    T = rand(40, 10)
    cur.execute("CREATE TENSOR T FROM ? TILE (10, 10)", [T])
    cur.execute("CREATE TABLE pick (row_block INTEGER, weight DOUBLE)")
    cur.execute("INSERT INTO pick VALUES (1, 2.0), (3, -1.0)")
    cur.execute("SELECT T.i, T.j, T.v * p.weight AS v FROM T JOIN pick AS p ON T.i = p.row_block")
    expected = np.zeros_like(T)
    expected[10:20] = T[10:20] * 2
    expected[30:40] = -T[30:40]
    close(cur.fetch_tensor(), expected)


def test_chained_kernels_on_a_tile_shared_by_many_join_rows(cur):
    # every B tile meets several A tiles; kernels computed in place on temporaries must not touch B
    A, B = rand(40, 10), rand(10, 10)
    cur.execute("CREATE TENSOR A FROM ? TILE (10, 10)", [A])
    cur.execute("CREATE TENSOR B FROM ? TILE (10, 10)", [B])
    cur.execute("SELECT A.i, A.j, EXP(RELU(TRANSPOSE(B.v) * 2 + A.v) - 1) / 3 AS v FROM A JOIN B ON A.j = B.j")
    expected = np.exp(np.maximum(np.tile(B.T, (4, 1)) * 2 + A, 0) - 1) / 3
    close(cur.fetch_tensor(), expected)
    np.testing.assert_array_equal(cur.execute("SELECT * FROM B").fetch_tensor(), B)
