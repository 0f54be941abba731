"""Zeros are values: zero-initialised parameters train, and tiles that become all zero keep their rows.

The model of the trust probe: z = X W + b, loss = SUM(SUMSQ(z - Y)), W and b made with FILL ZEROS (the
PyTorch habit nn.init.zeros_). It used to store no tiles, so the loss was 0 and MINIMIZE never moved W.
The oracle is the same model in numpy float64 (PyTorch's SGD and Adam, step by step); gradients with
tiles zeroed by UPDATE or by a dead RELU region are checked against float64 central differences.
"""
from __future__ import annotations

import numpy as np
import pytest

import trdb

N, D, K = 12, 6, 4


@pytest.fixture
def data():
    rng = np.random.default_rng(7)
    return rng.standard_normal((N, D)), rng.standard_normal((N, K))


def linear_model(con, X, Y, w_tile=(3, 2)) -> None:
    con.execute("CREATE TENSOR X FROM ? TILE (4, 3) DTYPE float64", [X])
    con.execute("CREATE TENSOR Y FROM ? TILE (4, 2) DTYPE float64", [Y])
    con.execute(f"CREATE TENSOR W SHAPE ({D}, {K}) TILE {w_tile} DTYPE float64 FILL ZEROS")
    con.execute(f"CREATE TENSOR b SHAPE ({K}) TILE (2) DTYPE float64 FILL ZEROS")
    con.execute("CREATE VIEW z AS SELECT X.i, W.j, SUM(MATMUL(X.v, W.v)) AS v FROM X JOIN W ON X.j = W.i "
                "GROUP BY X.i, W.j")
    con.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(z.v + b.v - Y.v)) AS v FROM z JOIN b ON z.j = b.i "
                "JOIN Y ON z.i = Y.i AND z.j = Y.j")


def reference_losses(X, Y, steps: int, optimizer: str, rate: float) -> list[float]:
    """The losses before each step, as PyTorch's SGD / Adam (defaults) report them, in float64."""
    W, b = np.zeros((D, K)), np.zeros(K)
    state = {name: (np.zeros_like(p), np.zeros_like(p)) for name, p in (("W", W), ("b", b))}
    losses = []
    for t in range(1, steps + 1):
        r = X @ W + b - Y
        losses.append(float((r ** 2).sum()))
        grads = {"W": 2 * X.T @ r, "b": 2 * r.sum(axis=0)}
        for name, p in (("W", W), ("b", b)):
            g = grads[name]
            if optimizer == "sgd":
                p -= rate * g
                continue
            m, v = state[name]
            m[:] = 0.9 * m + 0.1 * g
            v[:] = 0.999 * v + 0.001 * g * g
            p -= rate * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    return losses


def test_fill_zeros_keeps_every_tile_and_the_loss_sees_them(data):
    X, Y = data
    con = trdb.connect()
    linear_model(con, X, Y)
    assert con.execute("SELECT COUNT(*) FROM W").fetchone() == (4,)  # was 0: all-zero tiles were not stored
    assert con.execute("SELECT COUNT(*) FROM b").fetchone() == (2,)
    np.testing.assert_allclose(float(con.execute("SELECT * FROM loss").fetchone()[0]), (Y ** 2).sum(), rtol=1e-12)
    grad = con.execute("SELECT * FROM GRAD(loss, W)").fetch_tensor(shape=(D, K))
    np.testing.assert_allclose(grad, 2 * X.T @ (-Y), rtol=1e-10)


@pytest.mark.parametrize("optimizer,rate", [("sgd", 0.01), ("adam", 0.05)])
def test_a_zero_initialised_model_trains_as_pytorch_does(data, optimizer, rate):
    X, Y = data
    con = trdb.connect()
    linear_model(con, X, Y)
    rows = con.execute(f"MINIMIZE loss WRT (W, b) WITH (optimizer = '{optimizer}', learning_rate = {rate}, "
                       "steps = 5)").fetchall()
    np.testing.assert_allclose([loss for _, loss in rows], reference_losses(X, Y, 5, optimizer, rate), rtol=1e-5)
    assert con.execute("SELECT COUNT(*) FROM W").fetchone() == (4,)


def test_adam_moves_a_parameter_tile_the_loss_does_not_reach():
    """A present tile whose gradient is zero still moves under Adam (its momentum), as in PyTorch."""
    con = trdb.connect()
    con.execute("CREATE TENSOR W SHAPE (2, 2) TILE (1, 2) DTYPE float64 FILL ONES")
    con.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(W.v)) AS v FROM W WHERE W.i = 0")
    con.execute("MINIMIZE loss WRT (W) WITH (optimizer = 'adam', learning_rate = 0.1, steps = 1)")
    con.execute("UPDATE W SET v = W.v * 0 + 1 WHERE W.i = 0")  # the reached row is put back
    before = con.execute("SELECT * FROM W").fetch_tensor()
    con.execute("CREATE OR REPLACE VIEW loss AS SELECT SUM(SUMSQ(W.v)) AS v FROM W WHERE W.i = 1")
    con.execute("MINIMIZE loss WRT (W) WITH (optimizer = 'adam', learning_rate = 0.1, steps = 1)")
    after = con.execute("SELECT * FROM W").fetch_tensor()
    assert (after[0] != before[0]).all()  # row 0's momentum from the first run carries it on


def finite_difference(con, loss_sql: str, name: str, array: np.ndarray, direction: np.ndarray, tile) -> float:
    """(loss(T + eps D) - loss(T - eps D)) / 2 eps, with T re-created from each perturbed array."""
    eps, values = 1e-6, []
    for sign in (1, -1):
        con.execute(f"CREATE OR REPLACE TENSOR {name} FROM ? TILE {tile} DTYPE float64", [array + sign * eps * direction])
        values.append(float(np.asarray(con.execute(loss_sql).fetchone()[0])))
    con.execute(f"CREATE OR REPLACE TENSOR {name} FROM ? TILE {tile} DTYPE float64", [array])
    return (values[0] - values[1]) / (2 * eps)


def check_gradient(con, loss_view: str, name: str, array: np.ndarray, tile, seed: int) -> None:
    grad = con.execute(f"SELECT * FROM GRAD({loss_view}, {name})").fetch_tensor(shape=array.shape)
    direction = np.random.default_rng(seed).standard_normal(array.shape)
    expected = finite_difference(con, f"SELECT * FROM {loss_view}", name, array, direction, tile)
    np.testing.assert_allclose((grad * direction).sum(), expected, rtol=1e-6, atol=1e-8)


def test_gradient_through_a_dead_relu_region_and_a_zeroed_tile():
    """H = RELU(X W1) with a whole tile of X W1 negative (dead: all zero), W1 with a tile zeroed by UPDATE."""
    rng = np.random.default_rng(3)
    X = np.abs(rng.standard_normal((8, 4))) + 0.1
    W1 = rng.standard_normal((4, 6))
    W1[:, 3:] = -np.abs(W1[:, 3:]) - 0.1  # X > 0: columns 3.. of X W1 are negative, RELU kills them whole
    W2 = rng.standard_normal((6, 2))
    con = trdb.connect()
    con.execute("CREATE TENSOR X FROM ? TILE (4, 2) DTYPE float64", [X])
    con.execute("CREATE TENSOR W1 FROM ? TILE (2, 3) DTYPE float64", [W1])
    con.execute("CREATE TENSOR W2 FROM ? TILE (3, 2) DTYPE float64", [W2])
    con.execute("UPDATE W2 SET v = W2.v * 0 WHERE W2.i = 0")  # a tile that becomes all zero stays present
    W2[:3] = 0
    assert con.execute("SELECT COUNT(*) FROM W2").fetchone() == (2,)
    con.execute("CREATE VIEW h AS SELECT X.i, W1.j, RELU(SUM(MATMUL(X.v, W1.v))) AS v FROM X JOIN W1 ON X.j = W1.i "
                "GROUP BY X.i, W1.j")
    con.execute("CREATE VIEW out AS SELECT h.i, W2.j, SUM(MATMUL(h.v, W2.v)) AS v FROM h JOIN W2 ON h.j = W2.i "
                "GROUP BY h.i, W2.j")
    con.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(out.v + 1)) AS v FROM out")
    assert con.execute("SELECT COUNT(*) FROM h").fetchone() == (4,)  # the dead tiles are rows of h still
    expected = ((np.maximum(X @ W1, 0) @ W2 + 1) ** 2).sum()
    np.testing.assert_allclose(float(con.execute("SELECT * FROM loss").fetchone()[0]), expected, rtol=1e-12)
    check_gradient(con, "loss", "W2", W2, (3, 2), seed=1)
    check_gradient(con, "loss", "W1", W1, (2, 3), seed=2)


def test_structural_zeros_of_a_sparse_tensor_stay_absent():
    """Only tensors made sparse on purpose have absent tiles, and UPDATE and MINIMIZE leave them absent."""
    import scipy.sparse as sp
    A = np.zeros((4, 4))
    A[0, 0] = 2.0
    con = trdb.connect()
    con.execute("CREATE TENSOR A FROM ? TILE (2, 2) DTYPE float64", [sp.csr_matrix(A)])
    con.execute("UPDATE A SET v = A.v * 0")  # the present tile becomes zero, and stays present
    assert con.execute("SELECT A.i, A.j FROM A").fetchall() == [(0, 0)]
    con.execute("UPDATE A SET v = A.v + 3")
    con.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(A.v)) AS v FROM A")
    con.execute("MINIMIZE loss WRT (A) WITH (optimizer = 'adam', steps = 2)")
    assert con.execute("SELECT A.i, A.j FROM A").fetchall() == [(0, 0)]
