"""Kernels whose derivative is a function of their output (RELU, SIGMOID, TANH, EXP, SQRT): the backward
pass reads the projection's output, the forward's tiles, not its input; checked against central
finite differences and numpy, and the MLP gradient's plan keeps no pre-activation."""
from __future__ import annotations

import numpy as np
import pytest
from test_gradients import check, load

from helpers.mlp_views import load_small_mlp, mlp_grad_w1

NUMPY_DERIVATIVES = {
    "RELU": lambda a: (a > 0).astype(float),
    "SIGMOID": lambda a: (s := 1 / (1 + np.exp(-a))) * (1 - s),
    "TANH": lambda a: 1 - np.tanh(a) ** 2,
    "EXP": np.exp,
    "SQRT": lambda a: 0.5 / np.sqrt(a),
}


@pytest.mark.parametrize("kernel", sorted(NUMPY_DERIVATIVES))
def test_the_gradient_through_a_kernel_of_its_output(cur, kernel):
    rng = np.random.default_rng(3)
    A = rng.uniform(0.5, 2.0, (6, 4)) if kernel == "SQRT" else rng.standard_normal((6, 4))
    C = rng.standard_normal((6, 4))
    load(cur, "A", A, (3, 2))
    load(cur, "C", C, (3, 2))
    # the kernel's output and the input passed through, both in one projection; the loss weighs them by C
    cur.execute(f"CREATE VIEW f AS SELECT i, j, {kernel}(v) AS o, v AS same FROM A")
    cur.execute("CREATE VIEW loss AS SELECT SUM(REDUCE_SUM(f.o * C.v) + REDUCE_SUM(f.same * C.v * 0.5)) AS v "
                "FROM f JOIN C ON f.i = C.i AND f.j = C.j")
    check(cur, "loss", "A", A, (3, 2), expected=C * NUMPY_DERIVATIVES[kernel](A) + 0.5 * C)


def test_a_column_used_by_two_kernels_receives_both_gradients(cur):
    rng = np.random.default_rng(4)
    A = rng.standard_normal((4, 4))
    load(cur, "A", A, (2, 2))
    cur.execute("CREATE VIEW f AS SELECT i, j, TANH(v) AS t, EXP(v) AS e FROM A")
    cur.execute("CREATE VIEW loss AS SELECT SUM(REDUCE_SUM(f.t) + REDUCE_SUM(f.e * f.e)) AS v FROM f")
    check(cur, "loss", "A", A, (2, 2), expected=(1 - np.tanh(A) ** 2) + 2 * np.exp(2 * A))


def test_the_mlp_gradient_reads_the_forward_relu_and_keeps_no_pre_activation(cur):
    t = load_small_mlp(cur)
    plan = "\n".join(row[0] for row in cur.execute("EXPLAIN SELECT * FROM GRAD(loss, W1)").fetchall())
    assert plan.count("RELU(") == 1 and "RELU(MATMUL(" in plan  # computed once, on the product's tile
    assert "(sum > 0)" not in plan and "(v > 0)" in plan  # the mask is read from the forward's output
    got = cur.execute("SELECT * FROM GRAD(loss, W1)").fetch_tensor()
    np.testing.assert_allclose(got, mlp_grad_w1(t), rtol=1e-4, atol=1e-4)
