"""A kernel that makes a sparse tile dense holds the whole dense tile: past memory_limit it is refused before it
runs (the statement leaves the database as it was); sparse-keeping kernels and products still run."""
from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse

import trdb

N = 4000  # a dense tile of N x N float32 is 61 MiB; its CSR form here about 200 KiB


@pytest.fixture
def sparse_cur():
    con = trdb.connect()
    cur = con.cursor()
    matrix = scipy.sparse.random(N, N, density=0.001, format="csr", dtype=np.float32, random_state=1)
    cur.execute(f"CREATE TENSOR A FROM ? TILE ({N}, {N})", [matrix])
    cur.execute(f"CREATE TENSOR H FROM ? TILE ({N}, 8)", [np.ones((N, 8), np.float32)])
    cur.execute("SET memory_limit = '32MB'")
    yield cur, matrix
    con.close()


@pytest.mark.parametrize("query,kernel", [
    ("SELECT SUM(SUMSQ(EXP(A.v))) FROM A", "EXP"),
    ("SELECT A.i, A.j, A.v + 1 AS v FROM A", "+"),
    ("SELECT A.i, A.j, 1 - A.v AS v FROM A", "-"),
    ("SELECT A.i, A.j, SIGMOID(A.v) AS v FROM A", "SIGMOID"),
    ("SELECT A.i, B.j FROM A JOIN A AS B ON A.i = B.i AND A.j = B.j AND SUMSQ(EXP(A.v) - B.v) >= 0", "-")])
def test_a_kernel_making_a_large_sparse_tile_dense_is_refused(sparse_cur, query, kernel):
    cur, _ = sparse_cur
    with pytest.raises(trdb.OperationalError, match=rf"a tile of {re.escape(kernel)} \(TILE \({N}, {N}\), float32\) in "
                                                    r"\w+Exec, made dense from sparse tiles, is estimated at 61 MiB"):
        cur.execute(query)
    assert cur.execute("SELECT COUNT(*) FROM A").fetchone() == (1,)  # the connection goes on


@pytest.mark.parametrize("query,expected", [
    ("SELECT SUM(SUMSQ(A.v)) FROM A", lambda m: (m.data.astype(np.float64) ** 2).sum()),
    ("SELECT SUM(REDUCE_SUM(RELU(A.v * 2))) FROM A", lambda m: 2 * np.maximum(m.data, 0).sum()),
    ("SELECT SUM(REDUCE_SUM(A.v + A.v)) FROM A", lambda m: 2 * m.data.sum())])
def test_kernels_that_keep_tiles_sparse_run(sparse_cur, query, expected):
    cur, matrix = sparse_cur
    assert cur.execute(query).fetchone()[0] == pytest.approx(expected(matrix), rel=1e-4)


def test_a_product_of_a_sparse_tile_runs(sparse_cur):
    cur, matrix = sparse_cur
    got = cur.execute("SELECT A.i, H.j, SUM(MATMUL(A.v, H.v)) AS v FROM A JOIN H ON A.j = H.i "
                      "GROUP BY A.i, H.j").fetch_tensor()
    np.testing.assert_allclose(got, matrix @ np.ones((N, 8), np.float32), rtol=1e-5)


def test_under_a_larger_limit_the_dense_kernel_answers(sparse_cur):
    cur, matrix = sparse_cur
    cur.execute("SET memory_limit = '1GB'")
    got = cur.execute("SELECT SUM(REDUCE_SUM(EXP(A.v))) FROM A").fetchone()[0]
    expected = np.exp(matrix.data.astype(np.float64)).sum() + (N * N - matrix.nnz)
    assert got == pytest.approx(expected, rel=1e-4)
