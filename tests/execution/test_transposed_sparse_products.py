"""MATMUL(TRANSPOSE(A.v), G.v) of CSR tiles is scipy's product of A's CSC view (in a SUM: added in by scipy's CSC
kernel), with no transposed copy of A (tile_math/compile.py, tile_math/product_sum.py)."""
from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse

import trdb
from trdb.catalog.kernel_function import KernelFunction

QUERY = ("SELECT A.j AS i, G.j, SUM(MATMUL({transpose}, G.v)) AS v FROM A JOIN G ON A.i = G.i "
         "GROUP BY A.j, G.j")


@pytest.fixture
def con():
    con = trdb.connect()
    yield con
    con.close()


def _graph(n: int, seed: int) -> scipy.sparse.csr_array:
    return scipy.sparse.random_array((n, n), density=0.02, format="csr", dtype=np.float32, rng=seed)


@pytest.mark.parametrize("transpose", ["TRANSPOSE(A.v)", "TRANSPOSE(A.v, 1, 0)"])
@pytest.mark.parametrize("workers", [1, 2])
def test_a_transposed_csr_product_equals_numpy_and_builds_no_transposed_tile(con, transpose, workers, monkeypatch):
    a, g = _graph(300, 1), np.random.default_rng(2).standard_normal((300, 5)).astype(np.float32)
    con.execute(f"SET workers = {workers}")
    con.execute("CREATE TENSOR A FROM ? TILE (128, 128)", [a])   # edge tiles of 44 rows and columns
    con.execute("CREATE TENSOR G FROM ? TILE (128, 5)", [g])
    transposed, original = [], KernelFunction.call
    monkeypatch.setattr(KernelFunction, "call", lambda self, backend, args: (
        transposed.extend(args[:1]) if self.name == "TRANSPOSE" else None) or original(self, backend, args))
    got = con.execute(QUERY.format(transpose=transpose)).fetch_tensor()
    np.testing.assert_allclose(got, a.toarray().T @ g, rtol=1e-5, atol=1e-5)
    assert transposed == []  # no tile was transposed (each is CSR at density 0.02)


@pytest.mark.parametrize("query", [
    "SELECT A.j AS i, G.j, MATMUL(TRANSPOSE(A.v), G.v) AS v FROM A JOIN G ON A.i = G.i",
    QUERY.format(transpose="TRANSPOSE(A.v)"),  # groups of one tuple each: a projection of the product
])
def test_a_projection_of_a_transposed_csr_product_equals_numpy_and_transposes_nothing(con, query, monkeypatch):
    a, g = _graph(300, 7), np.random.default_rng(8).standard_normal((300, 6)).astype(np.float32)
    con.execute("CREATE TENSOR A FROM ? TILE (300, 300)", [a])
    con.execute("CREATE TENSOR G FROM ? TILE (300, 6)", [g])
    transposed, original = [], KernelFunction.call
    monkeypatch.setattr(KernelFunction, "call", lambda self, backend, args: (
        transposed.extend(args[:1]) if self.name == "TRANSPOSE" else None) or original(self, backend, args))
    np.testing.assert_allclose(con.execute(query).fetch_tensor(), a.toarray().T @ g, rtol=1e-5, atol=1e-5)
    assert transposed == []
    wide = np.ones((300, 6))  # float64 against the float32 CSR: the two kernels' calls, the promoted product
    con.execute("CREATE TENSOR G2 FROM ? TILE (300, 6) DTYPE float64", [wide])
    got = con.execute(query.replace("G ", "G2 AS G ")).fetch_tensor()
    np.testing.assert_allclose(got, a.toarray().T.astype(np.float64) @ wide, rtol=1e-6)
    assert got.dtype == np.float64 and transposed


def test_dense_tiles_and_other_dtypes_take_the_transpose_as_before(con):
    a, g = np.arange(12.0).reshape(4, 3), np.arange(8.0).reshape(4, 2)
    con.execute("CREATE TENSOR A FROM ? TILE (2, 3) DTYPE float64", [a])   # dense: transposed by the kernel
    con.execute("CREATE TENSOR G FROM ? TILE (2, 2) DTYPE float64", [g])
    got = con.execute(QUERY.format(transpose="TRANSPOSE(A.v)")).fetch_tensor()
    np.testing.assert_array_equal(got, a.T @ g)
    con.execute("CREATE TENSOR S FROM ? TILE (64, 64)", [_graph(64, 3)])   # float32 CSR times float64: a dtype misfit
    con.execute("CREATE TENSOR H FROM ? TILE (64, 2) DTYPE float64", [np.ones((64, 2))])
    got = con.execute("SELECT S.j AS i, H.j, SUM(MATMUL(TRANSPOSE(S.v), H.v)) AS v FROM S JOIN H ON S.i = H.i "
                      "GROUP BY S.j, H.j").fetch_tensor()
    np.testing.assert_allclose(got, _graph(64, 3).toarray().T.astype(np.float64) @ np.ones((64, 2)), rtol=1e-6)


def test_explain_analyze_counts_two_flops_per_stored_entry_and_column(con):
    a, g = _graph(256, 4), np.ones((256, 3), np.float32)
    con.execute("CREATE TENSOR A FROM ? TILE (128, 128)", [a])
    con.execute("CREATE TENSOR G FROM ? TILE (128, 3)", [g])
    lines = [row[0] for row in con.execute("EXPLAIN ANALYZE " + QUERY.format(transpose="TRANSPOSE(A.v)")).fetchall()]
    (total,) = [line for line in lines if line.startswith("Executed work:")]
    assert int(re.search(r"flops=\S+ \((\d+)\)", total).group(1)) == 2 * a.nnz * 3  # added in: no adds


def test_the_gradient_of_a_graph_propagation_is_the_transposed_product(con):
    a, h = _graph(200, 5), np.random.default_rng(6).standard_normal((200, 4)).astype(np.float32)
    con.execute("CREATE TENSOR A FROM ? TILE (100, 100)", [a])
    con.execute("CREATE TENSOR H FROM ? TILE (100, 4)", [h])
    con.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(p.v)) AS v FROM (SELECT A.i, H.j, SUM(MATMUL(A.v, H.v)) AS v "
                "FROM A JOIN H ON A.j = H.i GROUP BY A.i, H.j) AS p")
    got = con.execute("SELECT * FROM GRAD(loss, H)").fetch_tensor()
    dense = a.toarray().astype(np.float64)
    np.testing.assert_allclose(got, 2 * dense.T @ (dense @ h), rtol=1e-4, atol=1e-4)
