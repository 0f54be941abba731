"""Ctrl-C at any line of trdb's code during a statement: KeyboardInterrupt comes out, the database is as
before (or, once the commit is done, as after) and the connection works on.

When SIGINT arrives, Python runs its handler in the main thread between two lines of whatever code runs
there. Here a trace function runs the SIGINT handler at the n-th line that trdb's code runs in this
thread, for points spread over the whole statement: planning, opening and running the operators,
waiting for workers, writing tiles, committing. trdb's handler cancels the statement (api/ctrl_c.py).
A second press (raised right there, as Python's own handler does) is not run here: it sometimes left a
buffer-pool lock held (a `return` inside `with`, whose exit line this trace function still reaches).

Two places where a trace function could run the handler and a signal cannot are left out: the line
event a `with` statement makes on its way out, before it calls `__exit__` (Python looks for signals
after that call), and the garbage collector's finalizers, run inside any line while the trace function
allocates frames (collection is off while the statement runs).
"""
from __future__ import annotations

import dis
import functools
import gc
import linecache
import os
import signal
import sys
from types import CodeType, FrameType
from typing import Callable

import numpy as np
import pytest
from test_parallel import wait_for_no_workers

import trdb

ENGINE = os.path.dirname(trdb.__file__) + os.sep
POINTS = 40  # interrupts tried per statement, spread evenly over its lines


def run_interrupted(action: Callable[[], object], at: int) -> int:
    """Run `action`, running the SIGINT handler at the `at`-th line of trdb's code it
    runs (never when `at` is 0); the number of lines it ran (with workers, a few more or less each run:
    the main thread waits for them in polling loops)."""
    lines = 0

    def line(frame, event, arg):
        nonlocal lines
        if event == "line" and not leaving_with(frame):
            lines += 1
            if lines == at:
                signal.getsignal(signal.SIGINT)(signal.SIGINT, frame)  # Python's own, outside a statement, raises
        return line

    gc.disable()
    sys.settrace(lambda frame, event, arg: line if frame.f_code.co_filename.startswith(ENGINE) else None)
    try:
        action()
    finally:
        sys.settrace(None)
        gc.enable()
    return lines


def leaving_with(frame: FrameType) -> bool:
    """The line event of a `with` statement's normal exit: the next instruction loads the None arguments
    of `__exit__`."""
    instruction = instructions(frame.f_code).get(frame.f_lasti)
    return (instruction is not None and instruction.opname == "LOAD_CONST" and instruction.argval is None
            and linecache.getline(frame.f_code.co_filename, frame.f_lineno).lstrip().startswith("with "))


@functools.lru_cache(maxsize=None)
def instructions(code: CodeType) -> dict:
    return {i.offset: i for i in dis.get_instructions(code)}


def points(total: int) -> list[int]:
    return sorted({int(n) for n in np.linspace(1, total, POINTS)})


def make_database(workers: int):
    con = trdb.connect(workers=workers)
    cur = con.cursor()
    rng = np.random.default_rng(0)
    A = rng.standard_normal((64, 48), dtype=np.float32)
    B = rng.standard_normal((48, 32), dtype=np.float32)
    cur.execute("CREATE TENSOR A FROM ? TILE (16, 16)", [A])
    cur.execute("CREATE TENSOR B FROM ? TILE (16, 16)", [B])
    cur.execute("CREATE TENSOR C SHAPE (48, 32) TILE (16, 16)")  # no tiles: zeros
    cur.execute("CREATE TENSOR w SHAPE (48, 1) TILE (16, 1) FILL RANDOM_NORMAL(0, 0.1, 1)")
    cur.execute("CREATE VIEW loss AS SELECT SUM(REDUCE_SUM(SQUARE(z.v))) AS v FROM "
                "(SELECT A.i, w.j, SUM(MATMUL(A.v, w.v)) AS v FROM A JOIN w ON A.j = w.i GROUP BY A.i, w.j) AS z")
    return con, cur


MATMUL = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"
STATEMENTS = {
    "query": MATMUL,
    "update": "UPDATE A SET v = A.v * 2 WHERE A.i < 2",
    "insert": "INSERT INTO C SELECT B.i, B.j, B.v * 3 FROM B WHERE B.i > 0",
    "minimize": "MINIMIZE loss WRT (w) WITH (optimizer = 'adam', learning_rate = 0.01, steps = 2)",
}


def state(cur) -> dict:
    """What the statements may change: the tensors' values, and Adam's step count."""
    tensors = {name: cur.execute(f"SELECT * FROM {name}").fetch_tensor() for name in ("A", "B", "C", "w")}
    steps = cur.execute("SELECT step FROM _trdb.adam_steps").fetchall()
    return {**tensors, "adam steps": steps}


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray)
                                        else a[k] == b[k] for k in a)


@pytest.mark.slow
@pytest.mark.parametrize("name,workers", [("query", 1), ("query", 2), ("update", 1), ("insert", 2), ("minimize", 1)])
def test_ctrl_c_at_any_line_raises_it_and_loses_nothing(name, workers):
    sql = STATEMENTS[name]
    run = (lambda cur: cur.execute(sql).fetch_tensor()) if name == "query" else (lambda cur: cur.execute(sql))
    con, cur = make_database(workers)
    before = state(cur)
    total = run_interrupted(lambda: run(cur), 0)
    after = state(cur)  # a statement run in full: all of it, or (MINIMIZE) a whole number of its steps
    con.close()
    limit = sys.getrecursionlimit()  # raised while a statement plans or runs (pipeline/nesting.py)
    for at in points(total):
        con, cur = make_database(workers)
        try:
            ran = run_interrupted(lambda: run(cur), at)
        except KeyboardInterrupt:
            pass
        else:
            assert ran < at, f"interrupted at line {at} of {total}, the statement went on to the end"
        now = state(cur)  # the connection works on: these are statements too
        assert same(now, before) or same(now, after) or (name == "minimize" and now["adam steps"] == [(1,)]), \
            f"interrupted at line {at} of {total}: the database is neither as before nor as after"
        np.testing.assert_allclose(cur.execute(MATMUL).fetch_tensor(), now["A"] @ now["B"], rtol=1e-4, atol=1e-4)
        con.close()
        assert wait_for_no_workers() == [], f"interrupted at line {at} of {total}: a worker was left running"
        assert sys.getrecursionlimit() == limit, f"interrupted at line {at} of {total}: the recursion limit stayed raised"


def test_a_second_ctrl_c_during_the_rollback_leaves_nothing_open():
    """The first Ctrl-C lands just before COMMIT, the second just before the ROLLBACK that follows it: DuckDB
    still holds the statement's transaction. The next statement rolls it back and runs."""
    con, cur = make_database(1)
    before = state(cur)
    db = con._session().db
    execute = db.execute
    interrupts = {"COMMIT", "ROLLBACK"}

    def interrupted(sql, params=()):
        if sql in interrupts:
            interrupts.discard(sql)
            raise KeyboardInterrupt
        return execute(sql, params)

    db.execute = interrupted
    with pytest.raises(KeyboardInterrupt):
        cur.execute(STATEMENTS["update"])
    assert interrupts == set()
    db.execute = execute
    assert same(state(cur), before)  # the UPDATE was rolled back, not committed by the next statement
    cur.execute(STATEMENTS["update"])
    assert not same(state(cur), before)
    con.close()
