"""Python's full garbage collections wait while statements run (they walk every object: an UPDATE of 120,000
small tiles spent a third of its time in them); the thresholds the process had come back afterwards."""
from __future__ import annotations

import gc
import threading

import pytest

from trdb.execution import full_collections


@pytest.fixture
def full_collections_seen():
    """The full (generation 2) collections that start while the test runs."""
    seen = []

    def callback(phase, info):
        if phase == "start" and info["generation"] == 2:
            seen.append(info)
    gc.callbacks.append(callback)
    yield seen
    gc.callbacks.remove(callback)


def test_a_statement_over_many_small_tiles_runs_no_full_collection(con, full_collections_seen):
    con.execute("CREATE TENSOR A SHAPE (240000, 16) TILE (16, 4) FILL ONES")  # 60,000 tiles
    before = gc.get_threshold()
    full_collections_seen.clear()
    con.execute("UPDATE A SET v = A.v + 1")
    assert full_collections_seen == []
    assert gc.get_threshold() == before
    assert con.execute("SELECT SUM(v) AS v FROM A").fetchone()[0].sum() == 240000 * 16 * 2


def test_thresholds_come_back_when_the_last_of_several_statements_ends():
    before = gc.get_threshold()
    first_in, first_may_end = threading.Event(), threading.Event()
    during = []

    def first():
        with full_collections.deferred():
            first_in.set()
            first_may_end.wait(10)

    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait(10)
    with full_collections.deferred():
        during.append(gc.get_threshold())
        first_may_end.set()
        thread.join(10)
        during.append(gc.get_threshold())  # the first statement ended; this one still runs
    assert during == [(before[0], before[1], max(before[2], full_collections.GENERATION1_COLLECTIONS))] * 2
    assert gc.get_threshold() == before


def test_a_threshold_the_process_sets_during_a_statement_is_kept():
    before = gc.get_threshold()
    try:
        with full_collections.deferred():
            gc.set_threshold(500, 5, 5)
        assert gc.get_threshold() == (500, 5, 5)
        with full_collections.deferred():
            assert gc.get_threshold() == (500, 5, full_collections.GENERATION1_COLLECTIONS)
        assert gc.get_threshold() == (500, 5, 5)
    finally:
        gc.set_threshold(*before)


def test_a_failed_statement_gives_the_thresholds_back(con):
    before = gc.get_threshold()
    with pytest.raises(Exception):
        con.execute("SELECT * FROM no_such_tensor")
    assert gc.get_threshold() == before
