"""A query run again after a write runs its last run's plans as a program (pipeline/step_program.py): nothing
is planned while what it scans keeps its statistics, results follow the data, and its shared tuples are
carried to the next statement as a planned run's are."""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from trdb.pipeline import query

RNG = np.random.default_rng(11)
GRAD_W1 = "SELECT * FROM GRAD(loss, W1)"


@pytest.fixture
def counts(monkeypatch):
    """Physical plannings and shared subplans' runs (planned or run as a program), counted."""
    seen = {"planned": 0, "shared": 0}
    physical, execute = query.Pipeline.physical, query.Pipeline.execute

    def counted_physical(self, *args, **kwargs):
        seen["planned"] += 1
        return physical(self, *args, **kwargs)

    def counted_execute(self, node, *args, **kwargs):
        seen["shared"] += bool(kwargs.get("keep"))
        return execute(self, node, *args, **kwargs)
    monkeypatch.setattr(query.Pipeline, "physical", counted_physical)
    monkeypatch.setattr(query.Pipeline, "execute", counted_execute)
    return seen


@pytest.fixture
def con():
    con = trdb.connect()
    arrays = {"X": RNG.standard_normal((12, 4)), "W1": RNG.standard_normal((4, 6)), "W2": RNG.standard_normal((6, 2)),
              "Y": RNG.standard_normal((12, 2))}
    for name, tile in [("X", (6, 4)), ("W1", (4, 3)), ("W2", (3, 2)), ("Y", (6, 2))]:
        con.execute(f"CREATE TENSOR {name} FROM ? TILE {tile}", [arrays[name]])
    con.execute("CREATE TENSOR other SHAPE (2) TILE (2) FILL ONES")
    con.execute("CREATE VIEW h AS SELECT X.i, W1.j, RELU(SUM(MATMUL(X.v, W1.v))) AS v FROM X JOIN W1 ON X.j = W1.i "
                "GROUP BY X.i, W1.j")
    con.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(z.v - Y.v)) AS v FROM (SELECT h.i, W2.j, "
                "SUM(MATMUL(h.v, W2.v)) AS v FROM h JOIN W2 ON h.j = W2.i GROUP BY h.i, W2.j) AS z "
                "JOIN Y ON z.i = Y.i AND z.j = Y.j")
    return con


def _numpy_grads(con) -> dict[str, np.ndarray]:
    X, W1, W2, Y = (con.execute(f"SELECT * FROM {n}").fetch_tensor() for n in ("X", "W1", "W2", "Y"))
    pre = X @ W1
    hidden = np.maximum(pre, 0)
    error = 2 * (hidden @ W2 - Y)
    return {"W1": X.T @ ((error @ W2.T) * (pre > 0)), "W2": hidden.T @ error}


def _grad(con, param: str = "W1") -> np.ndarray:
    return con.execute(f"SELECT * FROM GRAD(loss, {param})").fetch_tensor()


def test_a_query_after_a_write_plans_nothing_and_reads_the_new_values(con, counts):
    np.testing.assert_allclose(_grad(con), _numpy_grads(con)["W1"], rtol=1e-10)
    for scale in (2.0, 0.5, -1.0):
        con.execute("UPDATE other SET v = other.v + 1")  # unrelated: the plan cache's key changes
        con.execute(f"UPDATE W2 SET v = W2.v * {scale}")  # what it reads: new values, the same statistics
        planned = counts["planned"]
        grad = _grad(con)
        assert counts["planned"] == planned, "the program ran: nothing was planned"
        np.testing.assert_allclose(grad, _numpy_grads(con)["W1"], rtol=1e-10)


def test_changed_statistics_plan_again_with_right_results(con, counts):
    _grad(con)
    con.execute("UPDATE X SET v = X.v * 0 WHERE i = 0")  # a tile of zeros: X's statistics change
    planned = counts["planned"]
    grad = _grad(con)
    assert counts["planned"] > planned
    np.testing.assert_allclose(grad, _numpy_grads(con)["W1"], rtol=1e-10)


def test_shared_tuples_of_a_statement_run_as_a_program_are_carried_to_the_next(con, counts):
    _grad(con, "W1")
    _grad(con, "W2")
    con.execute("UPDATE other SET v = other.v + 1")
    shared, planned = counts["shared"], counts["planned"]
    grads = {"W1": _grad(con, "W1")}  # its program
    alone = counts["shared"] - shared
    assert alone > 0 and counts["planned"] == planned
    grads["W2"] = _grad(con, "W2")
    assert counts["shared"] - shared - alone < alone, "the forward pass the program ran is read, not run again"
    expected = _numpy_grads(con)
    for param, grad in grads.items():
        np.testing.assert_allclose(grad, expected[param], rtol=1e-10)


def test_a_program_that_fails_leaves_the_next_run_right(con, monkeypatch):
    _grad(con)
    con.execute("UPDATE other SET v = other.v + 1")
    original = query.Pipeline.execute
    calls = []

    def failing(self, node, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise trdb.OperationalError("injected failure")
        return original(self, node, *args, **kwargs)
    monkeypatch.setattr(query.Pipeline, "execute", failing)
    with pytest.raises(trdb.OperationalError, match="injected"):
        _grad(con)
    monkeypatch.setattr(query.Pipeline, "execute", original)
    np.testing.assert_allclose(_grad(con), _numpy_grads(con)["W1"], rtol=1e-10)
    con.execute("UPDATE other SET v = other.v + 1")
    np.testing.assert_allclose(_grad(con), _numpy_grads(con)["W1"], rtol=1e-10)


def test_shared_tuples_of_other_statistics_stop_the_program_and_the_query_is_planned_afresh(counts):
    con = trdb.connect()
    values = RNG.standard_normal((8, 8)) * 3
    con.execute("CREATE TENSOR T FROM ? TILE (2, 2)", [values])
    con.execute("CREATE TENSOR other SHAPE (2) TILE (2) FILL ONES")
    con.execute("CREATE VIEW big AS SELECT T.i, T.j, T.v FROM T WHERE SUMSQ(T.v) > 10")
    query = ("SELECT a.i, a.j, SUMSQ(a.v + b.v) AS v FROM big AS a JOIN big AS b ON a.i = b.i AND a.j = b.j "
             "ORDER BY a.i, a.j")

    def expected(array):
        tiles = array.reshape(4, 2, 4, 2).transpose(0, 2, 1, 3)
        return [(i, j, float((4 * tiles[i, j] ** 2).sum())) for i in range(4) for j in range(4)
                if (tiles[i, j] ** 2).sum() > 10]
    planned_each = []
    for scale in (1.0, 1.0, 0.5):  # the last: fewer tiles pass the filter, T's statistics are the same
        con.execute("UPDATE other SET v = other.v + 1")
        con.execute(f"UPDATE T SET v = T.v * {scale}")
        values = values * scale
        shared, planned = counts["shared"], counts["planned"]
        rows = con.execute(query).fetchall()
        assert [(i, j) for i, j, _ in rows] == [(i, j) for i, j, _ in expected(values)]
        np.testing.assert_allclose([v for *_, v in rows], [v for *_, v in expected(values)], rtol=1e-10)
        assert counts["shared"] > shared  # the shared subplan ran, planned or as the program's first run
        planned_each.append(counts["planned"] - planned)
    assert planned_each[0] > 0 and planned_each[1] == 0, planned_each  # planned and recorded, then its program
    assert planned_each[2] > 0, "the program stopped at the shared tuples of other statistics"
