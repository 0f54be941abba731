"""Inside a Ray actor: the queues that batches routed to its fragments wait in, per execution.

The driver routes every batch to the actor of its consumer partition (`RayWorker.feed`), where it
waits in a bounded `Channel`, as between threads; a fragment's exchange consumers read it through a
`RemoteChannel`, the stand-in the driver put in the fragment in place of the driver-side channel.
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


class ActorExecution:
    """What one execution holds in one actor: its cancellation state and its inbound channels."""

    def __init__(self) -> None:
        self.state = ExecutionState()
        self.channels: dict[tuple[int, int], Channel] = {}
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

    def channel(self, execution_id: str, key: int, partition: int, producers: int) -> tuple[ActorExecution, Channel]:
        execution = self.execution(execution_id)
        if execution is None:
            raise QueryCancelled("the statement was cancelled")
        with self._lock:
            channel = execution.channels.get((key, partition))
            if channel is None:
                channel = execution.channels[(key, partition)] = Channel(1, producers, execution.state)
        return execution, channel

    def deliver(self, execution_id: str, key: int, partition: int, producers: int, rows: Optional[Batch]) -> bool:
        """Queue a batch for a consumer partition (None: one producer has finished); False once cancelled."""
        try:
            channel = self.channel(execution_id, key, partition, producers)[1]
            if rows is None:
                channel.producer_done()
            else:
                channel.put(0, rows)  # blocks while the queue is full: the driver's feeds wait, and so the producers
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
        self._inbox: Optional[tuple[ActorExecution, Channel]] = None

    def __getstate__(self) -> dict:
        return {"execution_id": self.execution_id, "key": self.key, "producers": self.producers, "_inbox": None}

    def get(self, partition: int) -> Optional[Batch]:
        if self._inbox is None:
            self._inbox = INBOXES.channel(self.execution_id, self.key, partition, self.producers)
        execution, channel = self._inbox
        batch = channel.get(0)
        return None if batch is None else execution.to_backend(batch)


class FeedExec(ExchangeSourceExec):
    """Stands in (in a shipped fragment) for a scan, which runs on the driver and feeds its tuples here."""
