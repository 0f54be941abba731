"""On the driver: where the batches of one Ray producer go, with the bytes each exchange moves counted.

A batch is passed on as an object reference: to the driver's own channel (the final gather) the
driver reads it from the object store; to an actor it becomes the argument of a `feed` call, which
Ray resolves in the actor (zero-copy for numpy on the same node). Feeds to one actor may run in any
order (its threads take them concurrently), so a producer's end-of-stream marker is sent only after
all its batches have been accepted.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable

import ray

from trdb.execution.exchange import POLL_SECONDS, Channel
from trdb.execution.state import ExecutionState

FEED_WINDOW = 2  # feeds a producer may have in flight: overlaps a feed's round trip with the next batch


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


class ActorDestination:
    """Consumers in actors: each batch is fed to the actor that runs its partition's consumer.

    One per producer (its window of feeds in flight is its own); `actors` are the workers,
    `locations` the worker of each consumer partition, `producers` how many feed each partition.
    """

    def __init__(self, state: ExecutionState, actors: list, execution_id: str, key: int,
                 locations: dict[int, int], producers: int, moved: Moved, failed: Callable[[BaseException, int], BaseException]):
        self.state, self.actors, self.execution_id, self.key = state, actors, execution_id, key
        self.locations, self.producers, self.moved, self.failed = locations, producers, moved, failed
        self._in_flight: deque[tuple[int, Any]] = deque()

    def deliver(self, partitions: list[int], rows: Any, tuples: int, size: int) -> None:
        self.moved.add(tuples, size)
        for partition in partitions:
            self._feed(partition, rows)
            while len(self._in_flight) > FEED_WINDOW:
                self._settle_oldest()

    def finish(self) -> None:
        while self._in_flight:
            self._settle_oldest()
        for partition in self.locations:
            self._feed(partition, None)  # this producer's end, after all its batches were taken in
        while self._in_flight:
            self._settle_oldest()

    def _feed(self, partition: int, rows: Any) -> None:
        worker = self.locations.get(partition)
        if worker is None:
            return  # no operator reads this partition (a broadcast to more consumers than its reader has)
        ref = self.actors[worker].feed.remote(self.execution_id, self.key, partition, self.producers, rows)
        self._in_flight.append((worker, ref))

    def _settle_oldest(self) -> None:
        worker, ref = self._in_flight.popleft()
        try:
            settle(ref, self.state)
        except ray.exceptions.RayError as exc:
            raise self.failed(exc, worker) from None
