"""Shared subplans carried to the next statement: GRAD after GRAD reuses the forward pass, and
nothing survives a write, another backend or the memory budget."""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from helpers.mlp_views import create_mlp_views
from trdb.pipeline.query import Pipeline

RNG = np.random.default_rng(3)


@pytest.fixture
def mlp(cur):
    X, W1, W2, Y = (RNG.standard_normal(s) for s in [(12, 4), (4, 6), (6, 2), (12, 2)])
    for name, array, tile in [("X", X, (6, 4)), ("W1", W1, (4, 3)), ("W2", W2, (3, 2)), ("Y", Y, (6, 2))]:
        cur.execute(f"CREATE TENSOR {name} FROM ? TILE {tile}", [array])
    create_mlp_views(cur)
    H = np.maximum(X @ W1, 0)
    dout = 2 * (H @ W2 - Y)
    return cur, {"W1": X.T @ ((dout @ W2.T) * (X @ W1 > 0)), "W2": H.T @ dout}


@pytest.fixture
def shared_runs(monkeypatch):
    """How many shared subplans were computed (each one a plan run of its own, planned or run again as the
    statement's last program: pipeline/step_program.py)."""
    runs = []
    original = Pipeline.execute

    def execute(self, node, *args, **kwargs):
        if kwargs.get("keep"):
            runs.append(node)
        return original(self, node, *args, **kwargs)
    monkeypatch.setattr(Pipeline, "execute", execute)
    return runs


def grad(cur, param):
    return cur.execute(f"SELECT * FROM GRAD(loss, {param})").fetch_tensor()


def runs_of(shared_runs, work) -> int:
    before = len(shared_runs)
    work()
    return len(shared_runs) - before


def test_the_second_grad_reuses_the_forward_pass(mlp, shared_runs):
    cur, expected = mlp
    np.testing.assert_allclose(grad(cur, "W1"), expected["W1"], rtol=1e-10)
    after_grad = runs_of(shared_runs, lambda: np.testing.assert_allclose(grad(cur, "W2"), expected["W2"],
                                                                         rtol=1e-10))
    cur.execute("UPDATE Y SET v = Y.v * 1")  # a write: nothing is carried over it
    fresh = runs_of(shared_runs, lambda: np.testing.assert_allclose(grad(cur, "W2"), expected["W2"],
                                                                    rtol=1e-10))
    assert after_grad < fresh


def test_a_write_in_between_is_seen(mlp):
    cur, expected = mlp
    grad(cur, "W1")
    cur.execute("UPDATE Y SET v = Y.v * 2")
    X, W1, W2, Y = (cur.execute(f"SELECT * FROM {n}").fetch_tensor() for n in ("X", "W1", "W2", "Y"))
    H = np.maximum(X @ W1, 0)
    np.testing.assert_allclose(grad(cur, "W2"), H.T @ (2 * (H @ W2 - Y)), rtol=1e-10)


def test_nothing_is_kept_beyond_the_budget(mlp, shared_runs):
    cur, expected = mlp
    cur.execute("SET memory_limit = 64")  # a quarter of it is the budget: no tile fits
    grad(cur, "W1")
    after_grad = runs_of(shared_runs, lambda: grad(cur, "W2"))
    cur.execute("UPDATE Y SET v = Y.v * 1")
    assert runs_of(shared_runs, lambda: grad(cur, "W2")) == after_grad


def test_results_stay_right_after_a_failed_statement(mlp, shared_runs):
    cur, expected = mlp
    grad(cur, "W1")
    with pytest.raises(Exception):
        cur.execute("SELECT * FROM GRAD(loss, missing)")
    np.testing.assert_allclose(grad(cur, "W2"), expected["W2"], rtol=1e-10)


@pytest.mark.on_cpu  # of host memory_limit
def test_carried_work_gives_way_when_another_reservation_needs_the_memory():
    con = trdb.connect(workers=1)
    con.execute("CREATE TENSOR X SHAPE (64, 32) TILE (16, 16) FILL RANDOM_NORMAL(0, 1, 1)")
    con.execute("CREATE TENSOR W SHAPE (32, 8) TILE (16, 8) FILL RANDOM_NORMAL(0, 1, 2)")
    con.execute("CREATE VIEW h AS SELECT X.i, W.j, SUM(MATMUL(X.v, W.v)) AS v FROM X JOIN W ON X.j = W.i GROUP BY X.i, W.j")
    # a loss of a tuple a row block: computed for its gradient's seed, it shares the forward pass with the gradient
    con.execute("CREATE VIEW loss AS SELECT h.i, SUM(SUMSQ(RELU(h.v))) AS v FROM h GROUP BY h.i")
    con.execute("SELECT * FROM GRAD(loss, W)").fetchall()
    session = con._session()
    assert session.carried.tuples
    memory = session.db.file.memory
    other = memory.reservation("another connection's join")
    other.try_grow(memory.budget)  # all of it: the buffer pool and then the carried tuples give way
    assert not session.carried.tuples
    other.release_all()
    con.close()
