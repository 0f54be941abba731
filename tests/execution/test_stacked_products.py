"""Products of many small tiles at once: one GEMM where a side is shared, a row's outer product elementwise, a group's
sum of products without the products; against numpy's matmul and sum on the same stacks."""
from __future__ import annotations

import numpy as np
import pytest

from trdb.execution.tile_math.batched_kernels import stacked_product, summed_product
from trdb.kernels.axis_reductions import summed_rows

SHAPES = [(5, 1, 8, 1), (6, 3, 1, 4), (7, 4, 16, 16), (3, 2, 3, 1), (1, 2, 2, 2)]


def _operands(n, m, k, p, rng):
    """Each side as a stack of its own, as a broadcast view of one matrix, and as a transposed view."""
    a, b = rng.standard_normal((n, m, k)), rng.standard_normal((n, k, p))
    shared_a = np.broadcast_to(rng.standard_normal((1, m, k)), (n, m, k))
    shared_b = np.broadcast_to(rng.standard_normal((1, k, p)), (n, k, p))
    transposed_a = rng.standard_normal((n, k, m)).transpose(0, 2, 1)
    return [(a, b), (a, shared_b), (shared_a, b), (transposed_a, shared_b), (transposed_a, b)]


@pytest.mark.parametrize("shape", SHAPES)
def test_stacked_and_summed_products_are_numpys(shape):
    rng = np.random.default_rng(sum(shape))
    for a, b in _operands(*shape, rng):
        np.testing.assert_allclose(stacked_product(a, b), np.matmul(a, b), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(summed_product(a, b), np.matmul(a, b).sum(axis=0), rtol=1e-12, atol=1e-12)


def test_a_shared_side_is_read_as_one_matrix():
    """A stride-0 (broadcast) side is one GEMM: the broadcast view is never written, the result is a fresh array."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((50, 1, 8)).astype(np.float32)
    weight = np.broadcast_to(rng.standard_normal((1, 8, 3)).astype(np.float32), (50, 8, 3))
    out = stacked_product(a, weight)
    assert out.shape == (50, 1, 3) and out.dtype == np.float32 and out.flags.writeable
    np.testing.assert_allclose(out, np.matmul(a, weight), rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_summed_rows_is_numpys_sum_along_the_first_axis(dtype):
    rng = np.random.default_rng(2)
    for shape in [(4000, 8, 1), (33, 5), (1, 3, 3), (0, 4)]:
        stack = (rng.standard_normal(shape) * 10).astype(dtype)
        got = summed_rows(stack)
        assert got.shape == stack.shape[1:] and got.dtype == stack.dtype
        exact = stack.astype(np.float64).sum(axis=0)  # float32 adds in another order than numpy: within its rounding
        rounding = len(stack) * np.finfo(np.float32).eps * float(np.abs(stack).max(initial=0)) if dtype == np.float32 else 0
        np.testing.assert_allclose(got, exact, rtol=1e-12, atol=rounding + 1e-9)
    transposed = rng.standard_normal((100, 3, 4)).astype(dtype).transpose(0, 2, 1)
    np.testing.assert_allclose(summed_rows(transposed), transposed.sum(axis=0), rtol=1e-5)


def test_rows_times_one_weight_tile_and_the_sum_of_their_outer_products(cur):
    """A weight of one tile joined to every row goes beside them as a broadcast view; products and sums over
    the rows are numpy's (many tuples: the stacked paths)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5000, 8)).astype(np.float32)
    w = rng.standard_normal((8, 3)).astype(np.float32)
    cur.execute("CREATE TENSOR X FROM ? TILE (1, 8)", [x])
    cur.execute("CREATE TENSOR W FROM ? TILE (8, 3)", [w])
    rows = cur.execute("SELECT X.i, W.j, MATMUL(X.v, W.v) AS v FROM X JOIN W ON X.j = W.i").fetch_tensor()
    np.testing.assert_allclose(rows, x @ w, rtol=1e-4, atol=1e-4)
    total = cur.execute("SELECT SUM(MATMUL(TRANSPOSE(X.v), MATMUL(X.v, W.v))) AS v "
                        "FROM X JOIN W ON X.j = W.i").fetchall()[0][0]
    np.testing.assert_allclose(total, x.T.astype(np.float64) @ (x @ w), rtol=1e-3, atol=1e-2)
