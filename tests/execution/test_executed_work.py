"""EXPLAIN ANALYZE's executed work: each operator's FLOPs and kernel bytes, and the statement's total."""
from __future__ import annotations

import re

import numpy as np
import pytest

from helpers.mlp_views import create_mlp_views


def _analyze(cur, query: str) -> list[str]:
    return [row[0] for row in cur.execute("EXPLAIN ANALYZE " + query).fetchall()]


def _total(lines: list[str]) -> tuple[int, int]:
    (line,) = [line for line in lines if line.startswith("Executed work:")]
    flops, moved = re.search(r"flops=\S+ \((\d+)\) kernel_bytes=\S+ \((\d+)\)", line).groups()
    return int(flops), int(moved)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_tiled_product_counts_2mnk_and_the_adds_of_its_tile_products(cur, workers):
    cur.execute(f"SET workers = {workers}")
    cur.execute("SET dense_einsum_bytes = 0")  # tile products (no DenseEinsum: dense_products)
    a, b = np.ones((64, 96), np.float32), np.ones((96, 32), np.float32)
    cur.execute("CREATE TENSOR A FROM ? TILE (32, 32)", [a])
    cur.execute("CREATE TENSOR B FROM ? TILE (32, 32)", [b])
    query = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"
    lines = _analyze(cur, query)
    products = 2 * 64 * 96 * 32             # 2*m*n*k over all tile pairs
    pairs = 2 * 3 * 1                       # (row tiles of A) x (contracted tiles) x (column tiles of B)
    tile = 32 * 32 * 4
    adds = (96 // 32 - 1) * 64 * 32         # each output element sums 3 tile products: 2 adds
    aggregate = [line for line in lines if "HashAggregateExec" in line]
    assert aggregate and all("flops=" in line.split("actual")[1] for line in aggregate)
    # each output element adds its 3 tile products: 2 adds, each reading two tiles, writing one (on two
    # workers the partial sums made apart are added at the end, as many adds in all)
    flops, moved = _total(lines)
    assert flops == products + adds and moved == pairs * 3 * tile + adds // (32 * 32) * 3 * tile


def test_scans_and_joins_do_no_work_and_an_elementwise_kernel_one_flop_an_element(cur):
    cur.execute("CREATE TENSOR A FROM ? TILE (4, 4)", [np.ones((8, 8), np.float32)])
    lines = _analyze(cur, "SELECT i, j, RELU(v * 2) AS v FROM A")
    assert _total(lines)[0] == 2 * 64
    scans = [line for line in lines if "TensorScanExec" in line]
    assert scans and not any("flops=" in line.split("actual")[1] for line in scans)


def test_the_mlp_gradient_does_the_work_of_a_hand_written_forward_and_backward(cur):
    rows, features, hidden, tile = 64, 32, 16, 16
    rng = np.random.default_rng(0)
    for name, shape, tiles in (("X", (rows, features), (tile, tile)), ("W1", (features, hidden), (tile, tile)),
                               ("W2", (hidden, 1), (tile, 1)), ("Y", (rows, 1), (tile, 1))):
        cur.execute(f"CREATE TENSOR {name} FROM ? TILE {tiles}", [rng.standard_normal(shape, dtype=np.float32)])
    create_mlp_views(cur)
    flops, _ = _total(_analyze(cur, "SELECT * FROM GRAD(loss, W1)"))
    # numpy: H = relu(X @ W1); out = H @ W2; d_out = 2 (out - Y); d_hidden = (d_out @ W2.T) * (H > 0);
    # dW1 = X.T @ d_hidden, with products 2*m*n*k and elementwise kernels one per element
    reference = 2 * rows * features * hidden * 2 + 2 * rows * hidden * 2 + rows * hidden * 3 + rows * 3
    assert reference <= flops <= 1.05 * reference


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_adds_products_into_the_sum_as_numpy_would(cur, dtype):
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal(shape).astype(dtype) for shape in ((48, 96), (96, 24), (48, 24)))
    cur.execute("CREATE TENSOR A FROM ? TILE (16, 32)", [a])
    cur.execute("CREATE TENSOR B FROM ? TILE (32, 16)", [b])
    cur.execute("CREATE TENSOR C FROM ? TILE (16, 16)", [c])
    tolerance = {"rtol": 1e-4, "atol": 1e-4} if dtype == np.float32 else {"rtol": 1e-12}
    got = cur.execute("SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i "
                      "GROUP BY A.i, B.j").fetch_tensor()
    assert got.dtype == dtype
    np.testing.assert_allclose(got, a @ b, **tolerance)
    # the backward pass's form: a transposed operand (column-major), read in place
    got = cur.execute("SELECT A.j, C.j, SUM(MATMUL(TRANSPOSE(A.v, 1, 0), C.v)) AS v FROM A JOIN C ON A.i = C.i "
                      "GROUP BY A.j, C.j").fetch_tensor()
    np.testing.assert_allclose(got, a.T @ c, **tolerance)


@pytest.mark.parametrize("workers", [1, 2])
def test_work_is_counted_where_explain_analyze_reports_it_and_nowhere_else(cur, workers, monkeypatch):
    from trdb.execution import work
    counted = []
    original = work.kernel_work
    monkeypatch.setattr(work, "kernel_work", lambda *args: counted.append(1) or original(*args))
    cur.execute(f"SET workers = {workers}")
    cur.execute("CREATE TENSOR A FROM ? TILE (32, 32)", [np.ones((64, 64), np.float32)])
    query = "SELECT A.i, A.j, EXP(A.v * 2) AS v FROM A"
    np.testing.assert_allclose(cur.execute(query).fetch_tensor(), np.exp(np.full((64, 64), 2.0)), rtol=1e-6)
    assert not counted  # a query's kernels charge no operator
    assert _total(_analyze(cur, query))[0] >= 2 * 64 * 64 and counted  # the product and the EXP
    counted.clear()
    cur.execute(query).fetchall()  # the next query counts nothing again
    assert not counted
