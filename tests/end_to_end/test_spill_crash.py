"""A process killed (SIGKILL) while its statement spills: the database reopens with the state before the
statement, and no spill file is left under temp_directory."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import trdb

pytestmark = [pytest.mark.out_of_core, pytest.mark.on_cpu]

GUARD = 4 << 30
SETUP = """
    CREATE TENSOR A SHAPE (2048, 2048) TILE (128, 128) FILL RANDOM_NORMAL(0, 1, 3);
    CREATE TENSOR W SHAPE (2048, 2048) TILE (128, 128) FILL RANDOM_UNIFORM(-1, 1, 4);
    CREATE TENSOR R SHAPE (16, 16) TILE (8, 8) FILL CONSTANT(1.5)
"""
# Spilling statements (a tiny memory_limit: the join's build side and the groups of the sum spill),
# each of which would leave the database changed had it committed.
STATEMENTS = {
    "create_as": "CREATE TENSOR P AS SELECT A.i, W.j, SUM(MATMUL(A.v, W.v)) AS v FROM A JOIN W ON A.j = W.i "
                 "GROUP BY A.i, W.j",
    "group_by_into_existing": "INSERT INTO R SELECT A.i + 100 AS i, W.j + 100 AS j, SUM(MATMUL(A.v, W.v)) AS v "
                              "FROM A JOIN W ON A.j = W.i GROUP BY A.i, W.j",
}
CHILD = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, ({guard}, {guard}))
    import trdb
    cur = trdb.connect(sys.argv[1]).cursor()
    cur.execute("SET memory_limit = '64KB'")
    cur.execute("SET workers = 2")
    print("running", flush=True)
    cur.execute(sys.argv[2])
    print("finished", flush=True)
""").format(guard=GUARD)


def spill_files(temp: str) -> list[str]:
    """Files under temp_directory: trdb's spill files and DuckDB's temporary blocks."""
    return [os.path.join(folder, name) for folder, _, names in os.walk(temp) for name in names]


def state(path: str) -> tuple:
    con = trdb.connect(path, workers=1)  # one summation order: the totals before and after compare exactly
    try:
        cur = con.cursor()
        tensors = sorted(row[0] for row in cur.execute("SHOW TENSORS").fetchall())
        r = cur.execute("SELECT * FROM R").fetch_tensor()
        total = float(cur.execute("SELECT SUM(SUMSQ(A.v)) FROM A").fetchone()[0])
        return tensors, r.shape, float(np.abs(r - 1.5).max()), total
    finally:
        con.close()


def kill_while_spilling(path: str, temp: str, statement: str, wait_s: float = 120) -> bool:
    """Start `statement` in a child; SIGKILL it once a spill file appears. False if it ended without spilling."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, path, statement], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "TRDB_TEMP_DIRECTORY": temp})
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline and child.poll() is None:
            if any(name.endswith(".spill") for name in spill_files(temp)):
                child.send_signal(signal.SIGKILL)
                child.wait()
                return True
            time.sleep(0.005)
        return False
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()


@pytest.mark.parametrize("name", STATEMENTS)
def test_a_kill_while_spilling_leaves_the_state_before_the_statement(tmp_path, monkeypatch, name) -> None:
    path, temp = str(tmp_path / "db.trdb"), str(tmp_path / "temp")
    monkeypatch.setenv("TRDB_TEMP_DIRECTORY", temp)
    con = trdb.connect(path)
    con.cursor().execute(SETUP)
    con.close()
    before = state(path)
    assert kill_while_spilling(path, temp, STATEMENTS[name]), "the statement ended before any spill file appeared"
    after = state(path)  # the reopen removes the dead process's spill directory
    assert after == before
    assert spill_files(temp) == []
