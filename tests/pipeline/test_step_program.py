"""A MINIMIZE step's plans run again as a program (pipeline/step_program.py): later steps plan nothing, and a
step whose shared tuples changed what planning reads of them is planned afresh, with the same results."""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from trdb.pipeline import query
from trdb.statements.minimize import STEP_LISTENER


@pytest.fixture
def planned(monkeypatch):
    """The number of physical plannings so far, read after each step of a MINIMIZE (a list, one per step)."""
    calls, per_step = [], []
    original = query.Pipeline.physical

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(query.Pipeline, "physical", counted)
    token = STEP_LISTENER.set(lambda step, steps, loss: per_step.append(len(calls)))
    yield per_step
    STEP_LISTENER.reset(token)


def _mlp(con, rng):
    con.execute("CREATE TENSOR X FROM ? TILE (50, 4)", [rng.standard_normal((100, 8)).astype(np.float32)])
    con.execute("CREATE TENSOR Y FROM ? TILE (50, 3)", [rng.standard_normal((100, 3)).astype(np.float32)])
    con.execute("CREATE TENSOR W1 FROM ? TILE (4, 6)", [rng.standard_normal((8, 6)).astype(np.float32) * 0.3])
    con.execute("CREATE TENSOR W2 FROM ? TILE (6, 3)", [rng.standard_normal((6, 3)).astype(np.float32) * 0.3])
    con.execute("CREATE VIEW h AS SELECT X.i, W1.j, RELU(SUM(MATMUL(X.v, W1.v))) AS v FROM X JOIN W1 ON X.j = W1.i "
                "GROUP BY X.i, W1.j")
    con.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(z.v - Y.v)) AS v FROM (SELECT h.i, W2.j, "
                "SUM(MATMUL(h.v, W2.v)) AS v FROM h JOIN W2 ON h.j = W2.i GROUP BY h.i, W2.j) AS z "
                "JOIN Y ON z.i = Y.i AND z.j = Y.j")


def _numpy_mlp(con_initial, steps: int, rate: float) -> tuple[list, np.ndarray, np.ndarray]:
    X, Y, W1, W2 = (np.asarray(con_initial[n], dtype=np.float64) for n in ("X", "Y", "W1", "W2"))
    losses = []
    for _ in range(steps):
        pre = X @ W1
        hidden = np.maximum(pre, 0)
        error = hidden @ W2 - Y
        losses.append(float((error ** 2).sum()))
        grad_w2 = hidden.T @ (2 * error)
        grad_w1 = X.T @ ((2 * error @ W2.T) * (pre > 0))
        W1, W2 = W1 - rate * grad_w1, W2 - rate * grad_w2
    return losses, W1, W2


def test_later_steps_plan_nothing_and_match_numpy(planned):
    con = trdb.connect()
    _mlp(con, np.random.default_rng(5))
    initial = {n: con.execute(f"SELECT * FROM {n}").fetch_tensor() for n in ("X", "Y", "W1", "W2")}
    rows = con.execute("MINIMIZE loss WRT (W1, W2) WITH (learning_rate = 0.001, steps = 8)").fetchall()
    assert planned[0] > 0 and len(set(planned[1:])) == 1, planned  # step 1 planned; steps 2-8 ran its program
    losses, W1, W2 = _numpy_mlp(initial, 8, 0.001)
    np.testing.assert_allclose([loss for _, loss in rows], losses, rtol=1e-4)
    np.testing.assert_allclose(con.execute("SELECT * FROM W1").fetch_tensor(), W1, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(con.execute("SELECT * FROM W2").fetch_tensor(), W2, rtol=1e-4, atol=1e-5)


def _crossing(con):
    """A loss whose shared subplan (the filter on w's values) keeps more tuples as the values cross zero; the
    square's derivative reads the filtered values, so the gradient reads that subplan's tuples too."""
    start = -np.linspace(0.5, 0.05, 8).astype(np.float32)
    con.execute("CREATE TENSOR w FROM ? TILE (1)", [start])
    con.execute("CREATE VIEW pos AS SELECT w.i, w.v * w.v AS v FROM w WHERE w.v > 0")
    con.execute("CREATE VIEW loss AS SELECT a.v + b.v AS v FROM (SELECT SUM(SUMSQ(w.v - 1)) AS v FROM w) AS a, "
                "(SELECT SUM(REDUCE_SUM(p.v)) AS v FROM pos AS p) AS b")
    return start.astype(np.float64)


def _numpy_crossing(w: np.ndarray, steps: int, rate: float) -> tuple[list, np.ndarray]:
    losses = []
    for _ in range(steps):
        losses.append(float(((w - 1) ** 2).sum() + (w[w > 0] ** 2).sum()))
        w = w - rate * (2 * (w - 1) + 2 * w * (w > 0))
    return losses, w


def test_changed_statistics_plan_the_step_afresh(planned):
    con = trdb.connect()
    start = _crossing(con)
    rows = con.execute("MINIMIZE loss WRT (w) WITH (learning_rate = 0.1, steps = 12)").fetchall()
    losses, final = _numpy_crossing(start, 12, 0.1)
    np.testing.assert_allclose([loss for _, loss in rows], losses, rtol=1e-5)
    np.testing.assert_allclose(con.execute("SELECT * FROM w").fetch_tensor(), final, rtol=1e-5)
    # the values crossed zero after step 1 and 2: those steps' programs no longer fitted, and they planned again
    assert planned[1] > planned[0] and planned[2] > planned[1] and len(set(planned[3:])) == 1, planned


def test_step_that_read_the_last_statements_tuples_is_not_repeated():
    """The first step reads the forward pass the GRAD before it computed (carried work): it is not a program
    to repeat; the steps after it still give numpy's values."""
    con = trdb.connect()
    start = _crossing(con)
    con.execute("SELECT * FROM GRAD(loss, w)").fetchall()
    rows = con.execute("MINIMIZE loss WRT (w) WITH (learning_rate = 0.1, steps = 6)").fetchall()
    losses, final = _numpy_crossing(start, 6, 0.1)
    np.testing.assert_allclose([loss for _, loss in rows], losses, rtol=1e-5)
    np.testing.assert_allclose(con.execute("SELECT * FROM w").fetch_tensor(), final, rtol=1e-5)


def test_a_loop_of_one_step_minimizes_plans_once(planned):
    """A training loop of one-step MINIMIZE statements on one connection runs the first one's program."""
    con = trdb.connect()
    _mlp(con, np.random.default_rng(6))
    initial = {n: con.execute(f"SELECT * FROM {n}").fetch_tensor() for n in ("X", "Y", "W1", "W2")}
    losses = [con.execute("MINIMIZE loss WRT (W1, W2) WITH (learning_rate = 0.001, steps = 1)").fetchall()[0][1]
              for _ in range(5)]
    assert planned[0] > 0 and len(set(planned[1:])) == 1, planned
    expected, W1, W2 = _numpy_mlp(initial, 5, 0.001)
    np.testing.assert_allclose(losses, expected, rtol=1e-4)
    np.testing.assert_allclose(con.execute("SELECT * FROM W1").fetch_tensor(), W1, rtol=1e-4, atol=1e-5)
