"""MINIMIZE WITH (commit_every = n): n steps commit together; the values are those of a commit every step."""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from trdb.statements import minimize

MODEL = ["CREATE TENSOR X FROM ? TILE (50, 4)", "CREATE TENSOR Y FROM ? TILE (50, 1)",
         "CREATE TENSOR w SHAPE (4, 1) TILE (4, 1) FILL RANDOM_NORMAL(0, 0.1, 7)",
         "CREATE VIEW loss AS SELECT SUM(SUMSQ(z.v - Y.v)) AS v FROM (SELECT X.i, w.j, SUM(MATMUL(X.v, w.v)) AS v "
         "FROM X JOIN w ON X.j = w.i GROUP BY X.i, w.j) AS z JOIN Y ON z.i = Y.i AND z.j = Y.j"]


def model(path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((100, 4)).astype(np.float32)
    con = trdb.connect(str(path))
    cur = con.cursor()
    for statement in MODEL:
        cur.execute(statement, [x] if "X FROM" in statement else [x @ np.ones((4, 1), np.float32)]
                    if "Y FROM" in statement else ())
    return con, cur


def trained(cur, options: str):
    rows = cur.execute(f"MINIMIZE loss WRT (w) WITH (optimizer = 'adam', learning_rate = 0.05, steps = 12{options})"
                       ).fetchall()
    return rows, cur.execute("SELECT * FROM w").fetch_tensor()


@pytest.mark.parametrize("every", [1, 5, 12, 40])
def test_grouped_commits_give_the_values_of_a_commit_every_step(tmp_path, every):
    con, cur = model(tmp_path / "a.trdb")
    expected_rows, expected = trained(cur, "")
    other, other_cur = model(tmp_path / "b.trdb")
    rows, values = trained(other_cur, f", commit_every = {every}")
    assert [r[0] for r in rows] == list(range(1, 13))
    np.testing.assert_array_equal(values, expected)
    assert rows == expected_rows
    assert other_cur.execute("SELECT step FROM _trdb.adam_steps").fetchall() == [(12,)]
    con.close(), other.close()


def test_a_failure_keeps_the_groups_that_committed(tmp_path, monkeypatch):
    con, cur = model(tmp_path / "a.trdb")
    trained(cur, ", steps = 5")
    after_five = cur.execute("SELECT * FROM w").fetch_tensor()
    moments = cur.execute("SELECT * FROM __trdb_adam_m__w").fetch_tensor()
    other, other_cur = model(tmp_path / "b.trdb")
    calls, update = [], minimize._update

    def failing_update(*args):
        calls.append(1)
        if len(calls) == 7:  # step 7 of the second group (steps 6 to 10) fails
            raise trdb.DataError("a failure in step 7")
        return update(*args)
    monkeypatch.setattr(minimize, "_update", failing_update)
    seen = []
    token = minimize.STEP_LISTENER.set(lambda step, steps, loss: seen.append(step))
    try:
        with pytest.raises(trdb.DataError, match="step 7"):
            other_cur.execute("MINIMIZE loss WRT (w) WITH (optimizer = 'adam', learning_rate = 0.05, steps = 12, "
                              "commit_every = 5)")
    finally:
        minimize.STEP_LISTENER.reset(token)
    assert seen == [1, 2, 3, 4, 5]  # told of each step once its group committed
    np.testing.assert_array_equal(other_cur.execute("SELECT * FROM w").fetch_tensor(), after_five)
    np.testing.assert_array_equal(other_cur.execute("SELECT * FROM __trdb_adam_m__w").fetch_tensor(), moments)
    assert other_cur.execute("SELECT step FROM _trdb.adam_steps").fetchall() == [(5,)]
    con.close(), other.close()


@pytest.mark.parametrize("value", ["0", "-2", "1.5", "'x'", "true", "NULL"])
def test_commit_every_must_be_a_positive_integer(tmp_path, value):
    con, cur = model(tmp_path / "a.trdb")
    with pytest.raises(trdb.ProgrammingError, match="commit_every must be a positive integer"):
        cur.execute(f"MINIMIZE loss WRT (w) WITH (commit_every = {value})")
    con.close()


def test_a_training_loop_of_one_step_minimizes_reads_no_step_count_and_sets_them_once_a_step(tmp_path, monkeypatch):
    """A MINIMIZE right after another of the same parameters takes their step counts from what that one wrote (it
    reads none), and a step sets them in the UPDATE that gives the written tensors their data versions."""
    from trdb.storage.database import Database
    con, cur = model(tmp_path / "a.trdb")
    cur.execute("CREATE TENSOR b SHAPE (1) TILE (1) FILL ZEROS")
    cur.execute("CREATE OR REPLACE VIEW loss AS SELECT SUM(SUMSQ(z.v + b.v - Y.v)) AS v FROM (SELECT X.i, w.j, "
                "SUM(MATMUL(X.v, w.v)) AS v FROM X JOIN w ON X.j = w.i GROUP BY X.i, w.j) AS z JOIN Y ON z.i = Y.i "
                "AND z.j = Y.j JOIN b ON b.i = z.j")
    statement = "MINIMIZE loss WRT (w, b) WITH (optimizer = 'adam', learning_rate = 0.05, steps = 1)"
    cur.execute(statement)
    sent, execute = [], Database.execute
    monkeypatch.setattr(Database, "execute", lambda self, sql, *args: sent.append(sql) or execute(self, sql, *args))
    for _ in range(3):
        cur.execute(statement)
    counts = [s for s in sent if "adam_step" in s]
    assert len(counts) == 3 and all(s.startswith("UPDATE _trdb.tensors SET ") and "data_version" in s for s in counts)
    monkeypatch.undo()
    assert cur.execute("SELECT param, step FROM _trdb.adam_steps ORDER BY param").fetchall() == [("b", 4), ("w", 4)]
    con.close()
