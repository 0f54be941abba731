"""A projection that another projection of the same shared input computes more of reads that one:
the MLP gradient's forward RELU runs once, though the backward pass adds lineage columns to it."""
from __future__ import annotations

import numpy as np

from helpers.mlp_views import load_small_mlp, mlp_grad_w1


def test_the_forward_relu_runs_once_in_the_gradient(cur):
    t = load_small_mlp(cur)
    plan = [row[0] for row in cur.execute("EXPLAIN SELECT * FROM GRAD(loss, W1)").fetchall()]
    assert sum("RELU(" in line for line in plan) == 1
    got = cur.execute("SELECT * FROM GRAD(loss, W1)").fetch_tensor()
    np.testing.assert_allclose(got, mlp_grad_w1(t), rtol=1e-4, atol=1e-4)


def test_a_projection_with_more_kernels_is_not_read_for_fewer(cur):
    cur.execute("CREATE TENSOR A FROM ? TILE (2, 2)", [np.arange(16, dtype=np.float32).reshape(4, 4)])
    query = ("SELECT p.i, p.j, p.v + q.v AS v FROM (SELECT i, j, RELU(v) AS v FROM A) AS p "
             "JOIN (SELECT i, j, EXP(v) AS v FROM A) AS q ON p.i = q.i AND p.j = q.j")
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    np.testing.assert_allclose(cur.execute(query).fetch_tensor(), np.maximum(a, 0) + np.exp(a), rtol=1e-6)


def test_a_minimize_step_runs_the_forward_relu_once(cur, monkeypatch):
    # its loss and its gradients run together: the gradients' RELU, with lineage columns, reads the loss's
    from trdb.catalog.kernel_function import KernelFunction
    from trdb.execution.tile_math import compile as compile_module
    t = load_small_mlp(cur)
    calls = []
    real, real_inplace = KernelFunction.call, compile_module.inplace_kernel

    def counting(self, backend, args):  # a tile, or tiles stacked (tile_math/batched_kernels.py): its elements
        calls.append((self.label, np.size(args[0])))
        return real(self, backend, args)

    def counting_inplace(expr, backend):  # a kernel run on an argument's fresh tile (RELU(MATMUL(..)))
        kernel = real_inplace(expr, backend)
        if kernel is None:
            return None
        return lambda values: calls.append((expr.function.label, max(np.size(v) for v in values))) or kernel(values)
    monkeypatch.setattr(KernelFunction, "call", counting)
    monkeypatch.setattr(compile_module, "inplace_kernel", counting_inplace)
    cur.execute("MINIMIZE loss WRT (W1, W2) WITH (learning_rate = 0.01, steps = 1)")
    # the hidden layer's 8 x 6 elements (2 x 2 tiles), each once
    assert sum(size for label, size in calls if label == "RELU") == 8 * 6
    np.testing.assert_allclose(cur.execute("SELECT * FROM W1").fetch_tensor(),
                               t["W1"] - 0.01 * mlp_grad_w1(t), rtol=1e-4, atol=1e-5)
