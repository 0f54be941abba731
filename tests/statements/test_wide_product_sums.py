"""A MINIMIZE step of a weight shared by many rows (a linear layer over rows of 1 x 16): its gradient, the sum of every
row's outer product, is made as one product (kernel_fusion.wide_product_sums), not row by row into a shared projection;
the step is numpy's."""
from __future__ import annotations

import numpy as np

from trdb.execution.tile_math import batched_kernels


def _rows(cur, n: int = 3000, width: int = 16):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((n, width)).astype(np.float32)
    y = rng.standard_normal((n, width)).astype(np.float32)
    w = (0.1 * rng.standard_normal((width, width))).astype(np.float32)
    cur.execute(f"CREATE TENSOR X FROM ? TILE (1, {width})", [x])
    cur.execute(f"CREATE TENSOR Y FROM ? TILE (1, {width})", [y])
    cur.execute(f"CREATE TENSOR W FROM ? TILE ({width}, {width})", [w])
    cur.execute(f"CREATE VIEW loss AS SELECT SUM(SUMSQ(MATMUL(X.v, W.v) - Y.v)) / {n} AS v "
                "FROM X JOIN W ON X.j = W.i JOIN Y ON Y.i = X.i")
    return x, y, w


def test_an_sgd_step_of_a_weight_over_rows_is_numpys(cur):
    x, y, w = _rows(cur)
    for _ in range(2):  # the second step runs the first one's program again
        loss = cur.execute("MINIMIZE loss WRT (W) WITH (optimizer = 'sgd', learning_rate = 0.05, steps = 1)").fetchall()
        residual = x.astype(np.float64) @ w - y
        np.testing.assert_allclose(loss[-1][1], (residual ** 2).sum() / len(x), rtol=1e-4)
        w = (w - 0.05 * 2 / len(x) * (x.T.astype(np.float64) @ residual)).astype(np.float32)
        np.testing.assert_allclose(cur.execute("SELECT * FROM W").fetch_tensor(), w, rtol=1e-4, atol=1e-5)


def test_no_row_gets_its_own_outer_product(cur, monkeypatch):
    """The products made per row are the forward ones (a row times the weight); the gradient's sum over the rows
    is made as whole products (`summed_product`), not as 16 x 16 tiles a row first."""
    made, summed = [], []
    stacked, whole = batched_kernels.stacked_product, batched_kernels.summed_product

    def watched_stacked(a, b):
        out = stacked(a, b)
        made.append(out.shape)
        return out

    def watched_summed(a, b):
        summed.append(len(a))
        return whole(a, b)
    monkeypatch.setattr(batched_kernels, "stacked_product", watched_stacked)
    monkeypatch.setattr(batched_kernels, "summed_product", watched_summed)
    _rows(cur)
    cur.execute("MINIMIZE loss WRT (W) WITH (optimizer = 'sgd', learning_rate = 0.05, steps = 2)").fetchall()
    assert summed and sum(summed) == 2 * 3000  # every row's product summed, once a step
    assert made and all(shape[1:] == (1, 16) for shape in made)  # rows times the weight: no 16 x 16 tile a row
