"""On the driver: where the batches of one Ray producer go, with the bytes each exchange moves counted.

A batch is passed on as an object reference: to the driver's own channel (the final gather) the
driver reads it from the object store; to an actor it becomes the argument of a `feed` call, which
Ray resolves in the actor (zero-copy for numpy on the same node). Feeds to one actor may run in any
order (its threads take them concurrently), so a producer's end-of-stream marker carries the number
of batches it sent to that partition. A feed waits in its actor while the partition's queue is full,
holding one of the actor's threads: `Slots` bound the feeds in flight to each consumer partition, so
that the threads a plan can hold are bounded by its partitions, not by its producers.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable

import ray

from trdb.execution.exchange.channel import POLL_SECONDS, Channel
from trdb.execution.operators.operator import Batch
from trdb.execution.state import ExecutionState

FEED_SLOTS = 4      # feeds in flight to one consumer partition, from all its producers together
SETTLE_AFTER = 32   # acknowledgements a producer keeps before checking the oldest (errors surface there)


class Moved:
    """Tuples and bytes an exchange moved, for EXPLAIN ANALYZE (a Channel's counters, for Ray)."""

    def __init__(self) -> None:
        self.tuples = 0
        self.bytes = 0
        self._lock = threading.Lock()

    def add(self, tuples: int, size: int) -> None:
        with self._lock:
            self.tuples += tuples
            self.bytes += size


def pieces(routed) -> list[tuple[list[int], Batch]]:
    """Routed (partition, rows) pairs with the partitions that share one batch (a broadcast) merged."""
    merged: dict[int, tuple[Batch, list[int]]] = {}
    for partition, rows in routed:
        merged.setdefault(id(rows), (rows, []))[1].append(partition)
    return [(partitions, rows) for rows, partitions in merged.values()]


def settle(ref: Any, state: ExecutionState) -> Any:
    """The value of `ref`, waiting in short steps so that a cancelled execution stops waiting."""
    while not ray.wait([ref], timeout=POLL_SECONDS)[0]:
        state.raise_if_cancelled()
    return ray.get(ref)


class LocalDestination:
    """Consumers on the driver (the final gather): batches go into the driver's channel."""

    def __init__(self, channel: Channel, moved: Moved):
        self.channel, self.moved = channel, moved

    def deliver(self, partitions: list[int], rows: Any, tuples: int, size: int) -> None:
        batch = settle(rows, self.channel.state) if isinstance(rows, ray.ObjectRef) else rows
        self.moved.add(tuples, size)
        for partition in partitions:
            self.channel.put(partition, batch)

    def finish(self) -> None:
        self.channel.producer_done()


class Slots:
    """The feeds in flight to one consumer partition: taken before a feed, given back when it returns."""

    def __init__(self, count: int = FEED_SLOTS):
        self._free = threading.Semaphore(count)

    def take(self, state: ExecutionState) -> None:
        while not self._free.acquire(timeout=POLL_SECONDS):
            state.raise_if_cancelled()

    def give_back(self, _done: Any = None) -> None:
        self._free.release()


class ActorDestination:
    """Consumers in actors: each batch is fed to the actor that runs its partition's consumer.

    One per producer (`producer` of the `producers` feeding each partition); `actors` are the
    workers, `locations` the worker of each consumer partition, `slots` each partition's `Slots`.
    """

    def __init__(self, state: ExecutionState, actors: list, execution_id: str, key: int, locations: dict[int, int],
                 slots: dict[int, Slots], producer: tuple[int, int], moved: Moved,
                 failed: Callable[[BaseException, int], BaseException]):
        self.state, self.actors, self.execution_id, self.key = state, actors, execution_id, key
        self.locations, self.slots, self.moved, self.failed = locations, slots, moved, failed
        self.producer, self.producers = producer
        self._sent: dict[int, int] = {}
        self._in_flight: deque[tuple[int, Any]] = deque()

    def deliver(self, partitions: list[int], rows: Any, tuples: int, size: int) -> None:
        """Feed `rows` (a batch, or a reference to one) to each partition's actor."""
        self.moved.add(tuples, size)
        if len(partitions) > 1 and not isinstance(rows, ray.ObjectRef):
            rows = ray.put(rows)  # a broadcast from the driver: stored once, read by every consumer
        for partition in partitions:
            worker = self.locations.get(partition)
            if worker is None:
                continue  # no operator reads this partition (a broadcast to more consumers than its reader has)
            slots = self.slots[partition]
            slots.take(self.state)
            ref = self._feed(worker, partition, rows, 0)
            ref.future().add_done_callback(slots.give_back)
            self._sent[partition] = self._sent.get(partition, 0) + 1
            if len(self._in_flight) > SETTLE_AFTER:
                self._settle_oldest()

    def finish(self) -> None:
        for partition, worker in self.locations.items():
            self._feed(worker, partition, None, self._sent.get(partition, 0))  # never waits in the actor
        while self._in_flight:  # errors (a dead actor) surface here
            self._settle_oldest()

    def _feed(self, worker: int, partition: int, rows: Any, sent: int) -> Any:
        ref = self.actors[worker].feed.remote(self.execution_id, self.key, partition, self.producers,
                                              self.producer, rows, sent)
        self._in_flight.append((worker, ref))
        return ref

    def _settle_oldest(self) -> None:
        worker, ref = self._in_flight.popleft()
        try:
            settle(ref, self.state)
        except ray.exceptions.RayError as exc:
            raise self.failed(exc, worker) from None
