"""GRAD against central finite differences of the same trdb loss (float64) and hand-derived numpy gradients."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import trdb
from helpers.finite_differences import finite_differences, load
from helpers.mlp_views import create_mlp_views

RNG = np.random.default_rng(42)


def rand(*shape):
    return RNG.standard_normal(shape)


PROBED = 24  # elements of a larger parameter whose derivative is taken by central differences (5 statements each)


def probed_indices(shape) -> list[tuple]:
    """Every element of a small parameter; of a larger one, PROBED of them, the same in every run."""
    indices = list(itertools.product(*(range(n) for n in shape)))
    if len(indices) <= PROBED:
        return indices
    chosen = np.random.default_rng(len(indices)).choice(len(indices), PROBED, replace=False)
    return [indices[i] for i in sorted(chosen.tolist())]


def check(cur, view, param, array, tile, expected=None):
    cur.execute(f"SELECT * FROM GRAD({view}, {param})")
    grad = cur.fetch_tensor(shape=array.shape)
    cur.execute("SET workers = 1")  # many tiny statements: parallel start-up would dominate
    indices = probed_indices(array.shape)
    numeric = finite_differences(cur, view, param, array.shape, tile, indices)
    at = tuple(np.array(indices).T)
    np.testing.assert_allclose(grad[at], numeric[at], rtol=1e-5, atol=1e-6)
    cur.execute("RESET workers")
    if expected is not None:
        np.testing.assert_allclose(grad, expected, rtol=1e-9, atol=1e-9)
    return grad


def least_squares(cur, scale: str = ""):
    """X, W, Y loaded and the view `loss` of SUM(SUMSQ(X·W - Y)) (with `scale` after it): the arrays."""
    X, W, Y = rand(20, 6), rand(6, 3), rand(20, 3)
    load(cur, "X", X, (8, 3)); load(cur, "W", W, (3, 3)); load(cur, "Y", Y, (8, 3))
    cur.execute("CREATE VIEW pred AS SELECT X.i, W.j, SUM(MATMUL(X.v, W.v)) AS v FROM X JOIN W ON X.j = W.i "
                "GROUP BY X.i, W.j")
    cur.execute(f"CREATE VIEW loss AS SELECT SUM(SUMSQ(p.v - Y.v)){scale} AS v FROM pred AS p JOIN Y ON p.i = Y.i "
                "AND p.j = Y.j")
    return X, W, Y


def test_least_squares(cur):
    X, W, Y = least_squares(cur)
    check(cur, "loss", "W", W, (3, 3), expected=2 * X.T @ (X @ W - Y))


def test_logistic_regression_with_bce(cur):
    X, w = rand(30, 5), rand(5, 1)
    labels = (RNG.random((30, 1)) > 0.5).astype(float)
    load(cur, "X", X, (10, 5)); load(cur, "w", w, (5, 1)); load(cur, "Y", labels, (10, 1))
    cur.execute("CREATE VIEW logits AS SELECT X.i, w.j, SUM(MATMUL(X.v, w.v)) AS v FROM X JOIN w ON X.j = w.i "
                "GROUP BY X.i, w.j")
    cur.execute("CREATE VIEW loss AS SELECT SUM(REDUCE_SUM(BCE_WITH_LOGITS(z.v, Y.v))) / 30 AS v FROM logits AS z "
                "JOIN Y ON z.i = Y.i AND z.j = Y.j")
    z = X @ w
    check(cur, "loss", "w", w, (5, 1), expected=X.T @ (1 / (1 + np.exp(-z)) - labels) / 30)


def test_two_layer_mlp_with_relu(cur):
    X, W1, W2, Y = rand(12, 4), rand(4, 6), rand(6, 2), rand(12, 2)
    load(cur, "X", X, (6, 4)); load(cur, "W1", W1, (4, 3)); load(cur, "W2", W2, (3, 2)); load(cur, "Y", Y, (6, 2))
    create_mlp_views(cur)
    H = np.maximum(X @ W1, 0)
    dout = 2 * (H @ W2 - Y)
    check(cur, "loss", "W2", W2, (3, 2), expected=H.T @ dout)
    check(cur, "loss", "W1", W1, (4, 3), expected=X.T @ ((dout @ W2.T) * (X @ W1 > 0)))


def test_softmax_cross_entropy(cur):
    X, W = rand(8, 5), rand(5, 4)
    onehot = np.eye(4)[RNG.integers(0, 4, 8)]
    load(cur, "X", X, (4, 5)); load(cur, "W", W, (5, 4)); load(cur, "T", onehot, (4, 4))
    cur.execute("CREATE VIEW probs AS SELECT X.i, W.j, SOFTMAX(SUM(MATMUL(X.v, W.v)), 1) AS v FROM X JOIN W "
                "ON X.j = W.i GROUP BY X.i, W.j")
    cur.execute("CREATE VIEW loss AS SELECT -SUM(REDUCE_SUM(T.v * LOG(p.v))) AS v FROM probs AS p JOIN T "
                "ON p.i = T.i AND p.j = T.j")
    logits = X @ W
    P = np.exp(logits - logits.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    check(cur, "loss", "W", W, (5, 4), expected=X.T @ (P - onehot))


def test_shared_weights_used_twice(cur):
    W, x = rand(4, 4), rand(4, 1)
    load(cur, "W", W, (2, 2)); load(cur, "x", x, (2, 1))
    cur.execute("CREATE VIEW h1 AS SELECT W.i, x.j, SUM(MATMUL(W.v, x.v)) AS v FROM W JOIN x ON W.j = x.i "
                "GROUP BY W.i, x.j")
    cur.execute("CREATE VIEW h2 AS SELECT W.i, h.j, SUM(MATMUL(W.v, TANH(h.v))) AS v FROM W JOIN h1 AS h "
                "ON W.j = h.i GROUP BY W.i, h.j")
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(h.v)) AS v FROM h2 AS h")
    check(cur, "loss", "W", W, (2, 2))


def test_loss_over_a_full_join(cur):
    A, B = rand(4, 4), rand(4, 4)
    B[:2, :] = 0  # B's first row of tiles is absent: the FULL JOIN brings zero tiles in
    load(cur, "A", A, (2, 2)); load(cur, "B", B, (2, 2))
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(A.v * 3 - B.v)) AS v FROM A FULL JOIN B "
                "ON A.i = B.i AND A.j = B.j")
    check(cur, "loss", "A", A, (2, 2), expected=6 * (3 * A - B))


def test_graph_convolution_over_sparse_adjacency(cur):
    n, f, h = 12, 3, 2
    adjacency = (RNG.random((n, n)) < 0.15) * 1.0
    adjacency[:4, 4:8] = 0  # whole absent blocks
    X, W = rand(n, f), rand(f, h)
    load(cur, "Adj", adjacency, (4, 4)); load(cur, "X", X, (4, 3)); load(cur, "W", W, (3, 2))
    cur.execute("CREATE VIEW xw AS SELECT X.i, W.j, SUM(MATMUL(X.v, W.v)) AS v FROM X JOIN W ON X.j = W.i "
                "GROUP BY X.i, W.j")
    cur.execute("CREATE VIEW conv AS SELECT Adj.i, xw.j, RELU(SUM(MATMUL(Adj.v, xw.v))) AS v FROM Adj JOIN xw "
                "ON Adj.j = xw.i GROUP BY Adj.i, xw.j")
    cur.execute("CREATE VIEW loss AS SELECT SUM(REDUCE_SUM(c.v)) AS v FROM conv AS c")
    Z = adjacency @ X @ W
    check(cur, "loss", "W", W, (3, 2), expected=(adjacency @ X).T @ (Z > 0).astype(float))


def test_a_cast_between_floats_passes_the_gradient_on_and_abs_is_its_sign(cur):
    W = rand(5, 4)
    load(cur, "W", W, (2, 3))
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(ABS(CAST(W.v AS float32)) * 3)) AS v FROM W")
    grad = cur.execute("SELECT * FROM GRAD(loss, W)").fetch_tensor()
    np.testing.assert_allclose(grad, 18 * W, rtol=1e-6)  # d/dw (3|w|)^2 = 18 w


@pytest.mark.parametrize("cast", ["bool", "int32", "int64"])
def test_a_cast_to_bool_or_an_integer_is_piecewise_constant_its_gradient_zero(cur, cast):
    """As a comparison's (and as in JAX); the ABS above a bool cast made a subtraction of booleans
    (an InternalError, found by the fuzzer)."""
    W = rand(6, 4) * 3
    load(cur, "W", W, (3, 2))
    cur.execute(f"CREATE VIEW loss AS SELECT SUM(SUMSQ(LOG(ABS(CAST(W.v AS {cast})) + 1) + W.v)) AS v FROM W")
    grad = check(cur, "loss", "W", W, (3, 2))  # the cast's part is flat: finite differences see only + W.v
    np.testing.assert_allclose(grad, 2 * (np.log(np.abs(W.astype(cast)) + 1) + W), rtol=1e-9)
    cur.execute("MINIMIZE loss WRT (W) WITH (steps = 1, optimizer = 'sgd', learning_rate = 0.01)")


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_an_integer_parameter_has_no_gradient(cur, dtype):
    """Its gradient was computed in its dtype: d mean / dW of 12 elements, 1/12, was 0, and MINIMIZE changed nothing."""
    cur.execute(f"CREATE TENSOR N SHAPE (4, 3) TILE (2, 3) DTYPE {dtype} FILL ONES")
    cur.execute("CREATE VIEW loss AS SELECT SUM(REDUCE_MEAN(CAST(W.v AS float64))) AS v FROM N AS W")
    for statement in ("SELECT * FROM GRAD(loss, N)", "MINIMIZE loss WRT (N) WITH (steps = 1, optimizer = 'sgd')"):
        with pytest.raises(trdb.ProgrammingError, match=f"N has dtype {dtype}, an integer dtype") as refused:
            cur.execute(statement)
        assert "float32" in refused.value.hint
    assert cur.execute("SELECT * FROM N").fetch_tensor().tolist() == [[1] * 3] * 4


def test_grad_under_two_workers_matches(cur):
    X, W, Y = rand(20, 6), rand(6, 3), rand(20, 3)
    load(cur, "X", X, (8, 4)); load(cur, "W", W, (4, 2)); load(cur, "Y", Y, (8, 2))
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(p.v - Y.v)) AS v FROM (SELECT X.i, W.j, SUM(MATMUL(X.v, "
                "W.v)) AS v FROM X JOIN W ON X.j = W.i GROUP BY X.i, W.j) AS p JOIN Y ON p.i = Y.i AND p.j = Y.j")
    grads = []
    for workers in (1, 2):
        cur.execute(f"SET workers = {workers}")
        grads.append(cur.execute("SELECT * FROM GRAD(loss, W)").fetch_tensor())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12)
    plan = "\n".join(r[0] for r in cur.execute("EXPLAIN SELECT * FROM GRAD(loss, W)"))
    assert "HashJoinExec" in plan and "GatherExec" in plan


def test_errors_name_the_problem(cur):
    load(cur, "W", rand(4, 4), (2, 2))
    cur.execute("CREATE VIEW notscalar AS SELECT W.i, W.j, W.v * 2 AS v FROM W")
    with pytest.raises(trdb.ProgrammingError, match="one 0-d"):
        cur.execute("SELECT * FROM GRAD(notscalar, W)")
    cur.execute("CREATE VIEW floors AS SELECT SUM(SUMSQ(W.v // 2)) AS v FROM W")
    with pytest.raises(trdb.NotSupportedError, match=r"operator //.*not differentiable"):
        cur.execute("SELECT * FROM GRAD(floors, W)")
    with pytest.raises(trdb.ProgrammingError, match='"W" is not a view'):
        cur.execute("SELECT * FROM GRAD(W, W)")
    with pytest.raises(trdb.ProgrammingError, match='"Q" is not a stored tensor'):
        cur.execute("SELECT * FROM GRAD(floors, Q)")


def test_projections_that_rename_and_scale_cost_the_gradient_no_join(cur):
    """A projection whose derivative reads only its output gradient (keys renamed, a tile scaled or negated)
    is not paired with its input again: the gradient through two such views has the joins of the loss written
    on the tensor directly, and the same values."""
    A, C = rand(4, 6), rand(6, 4)
    load(cur, "A", A, (2, 3)); load(cur, "C", C, (3, 2))
    cur.execute("CREATE VIEW r AS SELECT j AS a, i AS b, v * 3 AS v FROM A")
    cur.execute("CREATE VIEW r2 AS SELECT a AS i, b AS j, -v AS v FROM r")
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(MATMUL(r2.v, C.v))) AS v FROM r2 JOIN C "
                "ON r2.i = C.i AND r2.j = C.j")
    cur.execute("CREATE VIEW direct AS SELECT SUM(SUMSQ(MATMUL(-(A.v * 3), C.v))) AS v FROM A JOIN C "
                "ON A.j = C.i AND A.i = C.j")

    def joins(view):
        return "\n".join(row[0] for row in cur.execute(f"EXPLAIN SELECT * FROM GRAD({view}, A)")).count("Join")
    assert joins("loss") == joins("direct")
    grad = check(cur, "loss", "A", A, (2, 3))
    np.testing.assert_allclose(grad, cur.execute("SELECT * FROM GRAD(direct, A)").fetch_tensor(), rtol=1e-12)


def test_a_scalar_loss_is_seeded_by_a_constant_and_not_computed_for_its_gradient(cur):
    """The gradient of a loss of one scalar tuple (an aggregate without GROUP BY, projected) starts from the
    constant 1, placed beside each tuple without a join: its forward pass runs once, in the gradient's plan, and
    the loss's own aggregate not at all. A loss that may have no tuple (a filter above its aggregate) is still
    seeded by its own tuples."""
    X, W, Y = least_squares(cur, " / 40")

    def plan(view):
        return "\n".join(row[0] for row in cur.execute(f"EXPLAIN SELECT * FROM GRAD({view}, W)"))
    assert "SUMSQ" not in plan("loss") and "Shared subplan" not in plan("loss") and "cross" not in plan("loss")
    check(cur, "loss", "W", W, (3, 3), expected=2 * X.T @ (X @ W - Y) / 40)
    cur.execute("CREATE VIEW above AS SELECT l.v FROM loss AS l WHERE l.v > 1e9")  # no tuple: no gradient
    cur.execute("CREATE VIEW kept AS SELECT l.v FROM loss AS l WHERE l.v > 0")
    assert "SUMSQ" in plan("above")  # the loss, computed for the seed of its tuples
    assert not cur.execute("SELECT * FROM GRAD(above, W)").fetch_tensor(shape=W.shape).any()
    np.testing.assert_allclose(cur.execute("SELECT * FROM GRAD(kept, W)").fetch_tensor(), 2 * X.T @ (X @ W - Y) / 40,
                               rtol=1e-9)


def test_an_embedding_met_twice_in_a_join_is_summed_once(cur):
    """A triple joined with the embeddings of its head and its tail: each side's gradient goes to the parameter's
    keys unsummed (a triple meets one embedding of each, and the contributions are summed by key at the end),
    so the gradient plan has one aggregate, where a sum by lineage for each join side made three more."""
    E, R = rand(12, 4), rand(3, 4)
    heads, relations, tails = RNG.integers(0, 12, 40), RNG.integers(0, 3, 40), RNG.integers(0, 12, 40)
    load(cur, "E", E, (1, 4)); load(cur, "R", R, (1, 4))
    cur.execute("CREATE TABLE triples (h BIGINT, r BIGINT, t BIGINT)")
    cur.executemany("INSERT INTO triples VALUES (?, ?, ?)", list(zip(*(a.tolist() for a in (heads, relations, tails)))))
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(H.v + Q.v - U.v)) AS v FROM triples AS X "
                "JOIN E AS H ON H.i = X.h JOIN R AS Q ON Q.i = X.r JOIN E AS U ON U.i = X.t")
    plan = "\n".join(row[0] for row in cur.execute("EXPLAIN SELECT * FROM GRAD(loss, E)"))
    assert plan.count("HashAggregateExec") == plan.count("HashAggregateExec(group by [i, j]: SUM(v))") >= 1
    residual = 2 * (E[heads] + R[relations] - E[tails])
    expected = np.zeros_like(E)
    np.add.at(expected, heads, residual)
    np.add.at(expected, tails, -residual)
    check(cur, "loss", "E", E, (1, 4), expected=expected)
