"""Inside a Ray actor: the queues that batches routed to its fragments wait in, per execution.

The driver routes every batch to the actor of its consumer partition (`RayWorker.feed`), where it
waits in a bounded `Channel`, as between threads; a fragment's exchange consumers read it through a
`RemoteChannel`, the stand-in the driver put in the fragment in place of the driver-side channel.
Feeds run concurrently, in any order, so a producer's end-of-stream marker says how many batches it
sent, and counts as its end once that many have arrived.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Optional

import numpy as np

from trdb.errors import QueryCancelled
from trdb.execution.exchange import Channel, ExchangeSourceExec
from trdb.execution.operator import Batch
from trdb.execution.state import ExecutionState

_RELEASED_KEPT = 1024  # executions remembered as finished, so that a late batch is dropped, not kept


class Arrivals:
    """One consumer partition's channel, and how many batches each producer sent and has delivered."""

    def __init__(self, producers: int, state: ExecutionState):
        self.channel = Channel(1, producers, state)
        self._lock = threading.Lock()
        self._arrived: dict[int, int] = {}
        self._sent: dict[int, int] = {}

    def deliver(self, producer: int, rows: Optional[Batch], sent: int) -> None:
        """A batch (queued: this blocks while the queue is full), or the producer's end after `sent` batches."""
        if rows is not None:
            self.channel.put(0, rows)
        with self._lock:
            if rows is not None:
                self._arrived[producer] = self._arrived.get(producer, 0) + 1
            else:
                self._sent[producer] = sent
            ended = self._sent.get(producer) == self._arrived.get(producer, 0)
        if ended:  # the last to arrive of the batches and the marker: each producer ends once
            self.channel.producer_done()


class ActorExecution:
    """What one execution holds in one actor: its cancellation state and its inbound channels."""

    def __init__(self) -> None:
        self.state = ExecutionState()
        self.channels: dict[tuple[int, int], Arrivals] = {}
        self.backend: Any = None  # the kernel backend of the fragments (set by the first to run)

    def to_backend(self, batch: Batch) -> Batch:
        """Tiles arrive as host (numpy) arrays; a GPU backend wants them on its device."""
        backend = self.backend
        if backend is None or backend.name == "numpy":
            return batch
        return [tuple(backend.asarray(v) if isinstance(v, np.ndarray) else v for v in row) for row in batch]


class Inboxes:
    """The executions running in this process, by the id the driver gave them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[str, ActorExecution] = {}
        self._released: OrderedDict[str, None] = OrderedDict()

    def execution(self, execution_id: str) -> Optional[ActorExecution]:
        """The execution's state here (made on first use), or None when it has already been released."""
        with self._lock:
            if execution_id in self._released:
                return None
            return self._live.setdefault(execution_id, ActorExecution())

    def arrivals(self, execution_id: str, key: int, partition: int, producers: int) -> tuple[ActorExecution, Arrivals]:
        execution = self.execution(execution_id)
        if execution is None:
            raise QueryCancelled("the statement was cancelled")
        with self._lock:
            arrivals = execution.channels.get((key, partition))
            if arrivals is None:
                arrivals = execution.channels[(key, partition)] = Arrivals(producers, execution.state)
        return execution, arrivals

    def deliver(self, execution_id: str, key: int, partition: int, producers: int, producer: int,
                rows: Optional[Batch], sent: int) -> bool:
        """A batch for a consumer partition, or (rows None) a producer's end; False once cancelled."""
        try:
            # blocks while the queue is full: the driver's feeds wait, and so do the producers
            self.arrivals(execution_id, key, partition, producers)[1].deliver(producer, rows, sent)
            return True
        except Exception:  # cancelled, or failed here (that error reaches the driver from the failed fragment)
            return False

    def release(self, execution_id: str) -> None:
        """The execution has ended on the driver: stop what still runs of it here and forget it."""
        with self._lock:
            execution = self._live.pop(execution_id, None)
            self._released[execution_id] = None
            while len(self._released) > _RELEASED_KEPT:
                self._released.popitem(last=False)
        if execution is not None:
            execution.state.cancelled.set()


INBOXES = Inboxes()  # one per process: a Ray actor is a process


class RemoteChannel:
    """Stands in (in a shipped fragment) for the channel of an exchange whose consumer runs in an actor."""

    def __init__(self, execution_id: str, key: int, producers: int):
        self.execution_id, self.key, self.producers = execution_id, key, producers
        self._inbox: Optional[tuple[ActorExecution, Arrivals]] = None

    def __getstate__(self) -> dict:
        return {"execution_id": self.execution_id, "key": self.key, "producers": self.producers, "_inbox": None}

    def get(self, partition: int) -> Optional[Batch]:
        if self._inbox is None:
            self._inbox = INBOXES.arrivals(self.execution_id, self.key, partition, self.producers)
        execution, arrivals = self._inbox
        batch = arrivals.channel.get(0)
        return None if batch is None else execution.to_backend(batch)


class FeedExec(ExchangeSourceExec):
    """Stands in (in a shipped fragment) for a scan, which runs on the driver and feeds its tuples here."""
