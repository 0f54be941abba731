"""GRAD through LOG_SOFTMAX, CROSS_ENTROPY and RESHAPE against float64 central differences and numpy; ARGMAX
refused; a softmax classifier trained by MINIMIZE with CROSS_ENTROPY as with LOG(SOFTMAX)."""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from helpers.finite_differences import finite_differences, load

RNG = np.random.default_rng(5)


def check(cur, view, param, shape, tile, expected):
    grad = cur.execute(f"SELECT * FROM GRAD({view}, {param})").fetch_tensor(shape=shape)
    np.testing.assert_allclose(grad, expected, rtol=1e-9, atol=1e-9)
    cur.execute("SET workers = 1")  # many tiny statements
    every = list(np.ndindex(*shape))
    np.testing.assert_allclose(grad, finite_differences(cur, view, param, shape, tile, every), rtol=1e-5, atol=1e-6)
    cur.execute("RESET workers")


def softmax_rows(z):
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.fixture
def classifier(cur):
    """X (8 x 6) @ W (6 x 4) logits, tiled so that two products meet in a SUM; T one-hot."""
    X, W = RNG.standard_normal((8, 6)), RNG.standard_normal((6, 4))
    T = np.eye(4)[RNG.integers(0, 4, 8)]
    load(cur, "X", X, (4, 3)); load(cur, "W", W, (3, 4)); load(cur, "T", T, (4, 4))
    cur.execute("CREATE VIEW logits AS SELECT X.i, W.j, SUM(MATMUL(X.v, W.v)) AS v FROM X JOIN W ON X.j = W.i "
                "GROUP BY X.i, W.j")
    return X, W, T


@pytest.mark.parametrize("loss", ["CROSS_ENTROPY(l.v, T.v, 1)", "CROSS_ENTROPY(l.v, T.v)",
                                  "-REDUCE_SUM(T.v * LOG_SOFTMAX(l.v, 1), 1)", "-REDUCE_SUM(T.v * LOG_SOFTMAX(l.v), 1)"])
def test_cross_entropy_and_log_softmax_gradients(cur, classifier, loss):
    X, W, T = classifier
    # weights per row make the upstream gradient of each row differ (a wrong broadcast of it would show)
    weights = np.arange(1.0, 9.0)
    load(cur, "R", weights, (4,))
    cur.execute(f"CREATE VIEW loss AS SELECT SUM(REDUCE_SUM({loss} * R.v)) AS v FROM logits AS l JOIN T "
                "ON l.i = T.i AND l.j = T.j JOIN R ON R.i = l.i")
    weights = weights[:, None]
    check(cur, "loss", "W", W.shape, (3, 4), X.T @ ((softmax_rows(X @ W) - T) * weights))


def test_cross_entropy_of_integer_class_labels_gradients_as_of_one_hot_rows(cur, classifier):
    X, W, T = classifier
    load(cur, "R", np.arange(1.0, 9.0), (4,))
    cur.execute("CREATE TENSOR Y FROM ? TILE (4)", [np.argmax(T, 1)])  # int64 labels
    cur.execute("CREATE VIEW loss AS SELECT SUM(REDUCE_SUM(CROSS_ENTROPY(l.v, Y.v) * R.v)) AS v FROM logits AS l "
                "JOIN Y ON Y.i = l.i JOIN R ON R.i = l.i")
    check(cur, "loss", "W", W.shape, (3, 4), X.T @ ((softmax_rows(X @ W) - T) * np.arange(1.0, 9.0)[:, None]))
    with pytest.raises(trdb.ProgrammingError, match="int64"):  # labels are data, not a parameter
        cur.execute("SELECT * FROM GRAD(loss, Y)")


def test_cross_entropy_of_a_probability_target_gradients_for_logits_and_target(cur):
    # rows of the target that do not sum to 1 (weighted rows): the derivative's sum(target) shows
    Z, P = RNG.standard_normal((6, 3)), softmax_rows(RNG.standard_normal((6, 3))) * np.arange(1.0, 7.0)[:, None]
    load(cur, "Z", Z, (3, 3)); load(cur, "P", P, (3, 3))
    cur.execute("CREATE VIEW loss AS SELECT SUM(REDUCE_SUM(CROSS_ENTROPY(Z.v, P.v, 1))) AS v FROM Z JOIN P "
                "ON Z.i = P.i AND Z.j = P.j")
    check(cur, "loss", "Z", Z.shape, (3, 3), softmax_rows(Z) * P.sum(1, keepdims=True) - P)
    log_softmax = Z - Z.max(1, keepdims=True)
    log_softmax -= np.log(np.exp(log_softmax).sum(1, keepdims=True))
    check(cur, "loss", "P", P.shape, (3, 3), -log_softmax)


def test_cross_entropy_along_axis_0(cur):
    Z, T = RNG.standard_normal((4, 6)), np.eye(4)[:, RNG.integers(0, 4, 6)]
    load(cur, "Z", Z, (4, 3)); load(cur, "T", T, (4, 3))
    cur.execute("CREATE VIEW loss AS SELECT SUM(REDUCE_SUM(CROSS_ENTROPY(Z.v, T.v, 0))) AS v FROM Z JOIN T "
                "ON Z.i = T.i AND Z.j = T.j")
    check(cur, "loss", "Z", Z.shape, (4, 3), softmax_rows(Z.T).T - T)


@pytest.mark.parametrize("call,axis", [("LOG_SOFTMAX(Z.v)", 1), ("LOG_SOFTMAX(Z.v, 1)", 1), ("LOG_SOFTMAX(Z.v, 0)", 0)])
def test_log_softmax_as_the_last_kernel_of_a_projection(cur, call, axis):
    Z, C = RNG.standard_normal((4, 6)), RNG.standard_normal((4, 6))
    load(cur, "Z", Z, (4, 3)); load(cur, "C", C, (4, 3))
    cur.execute(f"CREATE VIEW ls AS SELECT Z.i, Z.j, {call} AS v FROM Z")
    cur.execute("CREATE VIEW loss AS SELECT SUM(REDUCE_SUM(s.v * C.v)) AS v FROM ls AS s JOIN C "
                "ON s.i = C.i AND s.j = C.j")
    # softmax within each 4 x 3 tile (kernels work on tiles)
    blocks = [Z[:, :3], Z[:, 3:]] if axis == 1 else [Z[:, :3].T, Z[:, 3:].T]
    softmax = [softmax_rows(b) if axis == 1 else softmax_rows(b).T for b in blocks]
    expected = np.hstack([C[:, 3 * k:3 * k + 3] - s * C[:, 3 * k:3 * k + 3].sum(axis, keepdims=True)
                          for k, s in enumerate(softmax)])
    check(cur, "loss", "Z", Z.shape, (4, 3), expected)


def test_reshape_gradient_goes_back_to_the_tile_shape(cur):
    W, C = RNG.standard_normal((4, 6)), RNG.standard_normal((6, 4))
    load(cur, "W", W, (2, 6)); load(cur, "C", C, (3, 4))
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(RESHAPE(W.v, (3, -1)) * C.v)) AS v FROM W JOIN C "
                "ON W.i = C.i AND W.j = C.j")
    expected = np.concatenate([2 * W[2 * k:2 * k + 2] * (C[3 * k:3 * k + 3] ** 2).reshape(2, 6) for k in (0, 1)])
    check(cur, "loss", "W", W.shape, (2, 6), expected)


def test_grad_through_argmax_is_refused_with_a_hint(cur, classifier):
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(ARGMAX(l.v, 1) * REDUCE_SUM(l.v, 1))) AS v FROM logits AS l")
    with pytest.raises(trdb.ProgrammingError, match="ARGMAX is not differentiable") as info:
        cur.execute("SELECT * FROM GRAD(loss, W)")
    text = str(info.value)
    assert "^" in text and "HINT: differentiate a loss of the scores" in text, text
    # its value is still there to read: accuracy beside the loss
    X, W, T = classifier
    got = cur.execute("SELECT l.i, ARGMAX(l.v, 1) AS v FROM logits AS l ORDER BY l.i").fetchall()
    np.testing.assert_array_equal(np.concatenate([v for _, v in got]), np.argmax(X @ W, 1))


def test_a_softmax_classifier_trained_with_cross_entropy_matches_log_of_softmax(tmp_path):
    X, W0 = RNG.standard_normal((16, 5)), RNG.standard_normal((5, 3)) * 0.1
    T = np.eye(3)[np.argmax(X[:, :3] + 0.3 * RNG.standard_normal((16, 3)), 1)]
    losses = {}
    for name, per_row in (("fused", "CROSS_ENTROPY(l.v, T.v, 1)"), ("labels", "CROSS_ENTROPY(l.v, Y.v, 1)"),
                          ("composed", "-REDUCE_SUM(T.v * LOG(SOFTMAX(l.v, 1)), 1)")):
        with trdb.connect(str(tmp_path / f"{name}.trdb")) as con:
            cur = con.cursor()
            load(cur, "X", X, (8, 5)); load(cur, "W", W0, (5, 3)); load(cur, "T", T, (8, 3))
            cur.execute("CREATE TENSOR Y FROM ? TILE (8)", [np.argmax(T, 1)])
            cur.execute("CREATE VIEW logits AS SELECT X.i, W.j, SUM(MATMUL(X.v, W.v)) AS v FROM X JOIN W "
                        "ON X.j = W.i GROUP BY X.i, W.j")
            cur.execute(f"CREATE VIEW loss AS SELECT SUM(REDUCE_SUM({per_row})) / 16 AS v FROM logits AS l "
                        "JOIN T ON l.i = T.i AND l.j = T.j JOIN Y ON Y.i = l.i")
            rows = cur.execute("MINIMIZE loss WRT (W) WITH (optimizer = 'sgd', learning_rate = 0.5, steps = 25)"
                               ).fetchall()
            losses[name] = np.array([loss for _, loss in rows])
            weights = cur.execute("SELECT * FROM W").fetch_tensor()
    np.testing.assert_allclose(losses["fused"], losses["composed"], rtol=1e-10)
    np.testing.assert_allclose(losses["labels"], losses["composed"], rtol=1e-10)
    assert losses["fused"][-1] < 0.7 * losses["fused"][0]
    # the same steps in numpy
    W = W0.copy()
    for _ in range(25):
        W -= 0.5 * X.T @ (softmax_rows(X @ W) - T) / 16
    np.testing.assert_allclose(weights, W, rtol=1e-9, atol=1e-12)
