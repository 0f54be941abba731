"""Exchange queues bounded in bytes as well as batches, reserved from the memory budget, and never deadlocked."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import trdb
from trdb.errors import QueryCancelled
from trdb.execution.exchange import channel as channel_module
from trdb.execution.exchange.channel import Channel
from trdb.execution.state import ExecutionState
from trdb.storage.memory import MemoryManager

TILE = np.zeros((32, 32), dtype=np.float32)  # 4 KB
ROW = TILE.nbytes + 8  # a tuple of a key and a tile


def batch(n: int = 1) -> list:
    return [(k, TILE) for k in range(n)]


def producer(channel: Channel, batches: list, partition: int = 0) -> threading.Thread:
    def run():
        for item in batches:
            channel.put(partition, item)
        channel.producer_done()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def drain_slowly(channel: Channel, partition: int = 0, watch=None) -> list:
    seen = []
    while (item := channel.get(partition)) is not None:
        if watch is not None:
            watch(channel)
        seen.append(item)
        time.sleep(0.001)
    return seen


def test_a_queue_holds_at_most_its_byte_share_and_its_bytes_are_reserved():
    memory = MemoryManager(256 << 20)
    channel = Channel(1, 1, ExecutionState(), memory)
    channel.share = 3 * ROW + 100  # three 4 KB batches, while 8 batches would be allowed
    highest = []
    thread = producer(channel, [batch() for _ in range(40)])
    got = drain_slowly(channel, watch=lambda c: highest.append((c.queued[0], memory.reserved)))
    thread.join(10)
    assert len(got) == 40 and [b[0][0] for b in got] == [0] * 40
    assert max(q for q, _ in highest) <= 3 * ROW + 100 and channel.peaks[0] <= 3 * ROW + 100
    assert max(r for _, r in highest) <= 3 * ROW + 100
    assert memory.reserved == 0  # every queued byte given back


def test_a_batch_larger_than_the_share_still_passes_one_at_a_time():
    memory = MemoryManager(256 << 20)
    channel = Channel(1, 1, ExecutionState(), memory)
    channel.share = 1000  # smaller than any batch
    thread = producer(channel, [batch(4) for _ in range(10)])
    got = drain_slowly(channel)
    thread.join(10)
    assert not thread.is_alive() and len(got) == 10 and channel.peaks[0] == 4 * ROW


def test_a_refused_reservation_waits_for_the_consumer_instead_of_failing():
    memory = MemoryManager(64 << 10)  # a budget of 32 KB, of which another holder takes nearly all
    other = memory.reservation("other")
    assert other.try_grow(memory.budget - 1000)
    channel = Channel(1, 1, ExecutionState(), memory)
    thread = producer(channel, [batch() for _ in range(20)])
    got = drain_slowly(channel)
    thread.join(10)
    assert len(got) == 20 and channel.peaks[0] == ROW  # one batch at a time: the empty queue's
    other.release_all()
    assert memory.reserved == 0


def test_a_closed_consumer_drops_its_batches_and_frees_their_bytes():
    memory = MemoryManager(256 << 20)
    channel = Channel(2, 1, ExecutionState(), memory)
    for _ in range(channel_module.QUEUE_BATCHES):
        channel.put(1, batch())
    assert memory.reserved == channel_module.QUEUE_BATCHES * ROW
    channel.close_partition(1)
    assert memory.reserved == 0
    started = time.perf_counter()
    for _ in range(3 * channel_module.QUEUE_BATCHES):
        channel.put(1, batch())  # no consumer will ever read: it must not wait
    assert time.perf_counter() - started < 1 and memory.reserved == 0


def test_a_cancelled_execution_stops_a_producer_waiting_for_room():
    state = ExecutionState()
    channel = Channel(1, 1, state, MemoryManager(256 << 20))
    channel.share = 1
    channel.put(0, batch())
    outcome = {}

    def blocked():
        try:
            channel.put(0, batch())
        except QueryCancelled as exc:
            outcome["error"] = exc
    thread = threading.Thread(target=blocked, daemon=True)
    thread.start()
    time.sleep(0.2)
    assert thread.is_alive()
    state.cancelled.set()
    thread.join(5)
    assert isinstance(outcome.get("error"), QueryCancelled)


@pytest.mark.parametrize("workers", [2, 3])
def test_parallel_plans_under_a_tiny_budget_give_numpy_results(workers):
    with trdb.connect() as con:
        cur = con.cursor()
        cur.execute("CREATE TENSOR A (i, j) SHAPE (96, 64) TILE (16, 16) FILL RANDOM_NORMAL(0, 1, 3)")
        a = cur.execute("SELECT * FROM A").fetch_tensor()
        cur.execute("SET memory_limit = '64KB'")
        cur.execute(f"SET workers = {workers}")
        got = cur.execute("SELECT A.i, A.j, A.v + B.v AS v FROM A JOIN A AS B ON A.i = B.i AND A.j = B.j")
        np.testing.assert_allclose(got.fetch_tensor(), 2 * a)
        sums = dict(cur.execute("SELECT A.j, SUM(A.v) AS v FROM A GROUP BY A.j").fetchall())
        blocks = a.reshape(6, 16, 4, 16).sum(0)
        assert sorted(sums) == [0, 1, 2, 3]
        for j, tile in sums.items():
            np.testing.assert_allclose(tile, blocks[:, j], rtol=1e-4, atol=1e-4)
        plan = "\n".join(r[0] for r in cur.execute("EXPLAIN ANALYZE SELECT A.j, SUM(A.v) AS v FROM A GROUP BY A.j"))
        assert "RepartitionExec" in plan or "GatherExec" in plan
        catalog = con._live.catalog
        assert catalog.db.file.memory.reserved == catalog.pool.bytes  # scans and queues gave everything back
