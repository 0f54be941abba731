"""A statement whose worker threads cannot start fails with a clear error, changes nothing and never hangs."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import trdb
from trdb.execution import workers

# 4096 tuples of A: more than an exchange's queue holds, so a producer left running would wait forever
DOUBLED = "CREATE TENSOR C AS SELECT A.i, A.j, A.v + B.v AS v FROM A JOIN A AS B ON A.i = B.i AND A.j = B.j"


class _ThreadsRunOut:
    """A thread pool that starts `threads` tasks and then no more, as a process at its thread or address-space
    limit."""

    def __init__(self, threads: int) -> None:
        self.pool, self.left = workers._POOL, threads

    def submit(self, task):
        if self.left == 0:
            raise RuntimeError("can't start new thread")
        self.left -= 1
        return self.pool.submit(task)


def busy_workers() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("trdb-worker-")]


@pytest.mark.parametrize("threads", [0, 1])
def test_a_statement_whose_workers_cannot_start_fails_cleanly_and_the_next_one_runs(tmp_path, monkeypatch, threads):
    con = trdb.connect(str(tmp_path / "db.trdb"), workers=2, min_parallel_cost=0)
    A = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    con.execute("CREATE TENSOR A FROM ? TILE (16, 16)", [A])
    monkeypatch.setattr(workers, "_POOL", _ThreadsRunOut(threads))
    outcome = {}

    def statement():
        try:
            con.execute(DOUBLED)
        except BaseException as exc:  # noqa: BLE001 - the test looks at what it was
            outcome["error"] = exc
    runner = threading.Thread(target=statement, daemon=True)
    runner.start()
    runner.join(30)
    assert not runner.is_alive(), "the statement hung when its worker threads could not start"
    error = outcome.get("error")
    assert isinstance(error, trdb.OperationalError) and "cannot start a worker thread" in str(error), error
    assert "SET workers lower" in error.hint
    assert busy_workers() == []  # the producers that had started were stopped and waited for
    assert [row[0] for row in con.execute("SHOW TENSORS").fetchall()] == ["A"]
    monkeypatch.undo()
    con.execute(DOUBLED)
    np.testing.assert_array_equal(con.execute("SELECT * FROM C").fetch_tensor(), A + A)
    con.close()
