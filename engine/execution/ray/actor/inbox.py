"""Inside a Ray actor: the queues that batches routed to its fragments wait in, per execution.

The driver routes every batch to the actor of its consumer partition (`RayWorker.feed`), where it
waits in that partition's bounded `Inbox`; the fragment's exchange consumer reads it through a
`RemoteChannel`, the stand-in the driver put in the fragment in place of the driver-side channel.
Feeds run concurrently, in any order, so a producer's end-of-stream marker says how many batches it
sent, and the producer has ended once that many have arrived. The marker never waits for room.
"""
from __future__ import annotations

import threading
from collections import OrderedDict, deque
from typing import Any, Iterator, Optional

import numpy as np

from trdb.errors import QueryCancelled
from trdb.execution.exchange.channel import POLL_SECONDS, QUEUE_BATCHES, ExchangeSourceExec
from trdb.execution.operators.operator import Batch
from trdb.execution.state import ExecutionState

_RELEASED_KEPT = 1024  # executions remembered as finished, so that a late batch is dropped, not kept


class Inbox:
    """One consumer partition's bounded queue, fed by `producers` producers."""

    def __init__(self, producers: int, state: ExecutionState):
        self.producers, self.state = producers, state
        self._batches: deque[Batch] = deque()
        self._changed = threading.Condition()
        self._arrived: dict[int, int] = {}
        self._sent: dict[int, int] = {}
        self._ended = 0

    def put(self, producer: int, rows: Batch) -> None:
        """Queue a batch, waiting while the queue is full (the backpressure the driver's feeds feel)."""
        with self._changed:
            while len(self._batches) >= QUEUE_BATCHES:
                self._changed.wait(POLL_SECONDS)
                self.state.raise_if_cancelled()
            self._batches.append(rows)
            self._arrived[producer] = self._arrived.get(producer, 0) + 1
            self._count_end(producer)
            self._changed.notify_all()

    def end(self, producer: int, sent: int) -> None:
        with self._changed:
            self._sent[producer] = sent
            self._count_end(producer)
            self._changed.notify_all()

    def _count_end(self, producer: int) -> None:
        # true once per producer: when the later of its last batch and its marker arrives
        if self._sent.get(producer) == self._arrived.get(producer, 0):
            self._ended += 1

    def get(self) -> Optional[Batch]:
        """The next batch, or None once every producer has ended and the queue is empty."""
        with self._changed:
            while not self._batches:
                if self._ended == self.producers:
                    self.state.raise_if_failed()
                    return None
                self._changed.wait(POLL_SECONDS)
                self.state.raise_if_cancelled()
            batch = self._batches.popleft()
            self._changed.notify_all()
            return batch


class ActorExecution:
    """What one execution holds in one actor: its cancellation state and its inboxes."""

    def __init__(self) -> None:
        self.state = ExecutionState()
        self.inboxes: dict[tuple[int, int], Inbox] = {}
        self.backend: Any = None  # the kernel backend of the fragments (set by the first to run)
        self._parked: dict[int, tuple[Any, Iterator]] = {}  # fragments whose output is streamed (`RayWorker.resume`)
        self._lock = threading.Lock()

    def park(self, first: Any, items: Iterator) -> int:
        """A fragment's first item and the rest of its output, until the driver asks for them; its number."""
        with self._lock:
            token = len(self._parked) + 1
            while token in self._parked:
                token += 1
            self._parked[token] = (first, items)
            return token

    def unpark(self, token: int) -> Optional[tuple[Any, Iterator]]:
        with self._lock:
            return self._parked.pop(token, None)

    def end(self) -> None:
        """Stop what runs of it here: fragments waiting for their output to be asked for are closed."""
        self.state.cancelled.set()
        with self._lock:
            parked, self._parked = list(self._parked.values()), {}
        for _, items in parked:
            items.close()  # runs the fragment's close

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

    def inbox(self, execution_id: str, key: int, partition: int, producers: int) -> tuple[ActorExecution, Inbox]:
        execution = self.execution(execution_id)
        if execution is None:
            raise QueryCancelled("the statement was cancelled")
        with self._lock:
            inbox = execution.inboxes.get((key, partition))
            if inbox is None:
                inbox = execution.inboxes[(key, partition)] = Inbox(producers, execution.state)
        return execution, inbox

    def deliver(self, execution_id: str, key: int, partition: int, producers: int, producer: int,
                rows: Optional[Batch], sent: int) -> bool:
        """A batch for a consumer partition, or (rows None) a producer's end; False once cancelled."""
        try:
            inbox = self.inbox(execution_id, key, partition, producers)[1]
            inbox.put(producer, rows) if rows is not None else inbox.end(producer, sent)
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
            execution.end()


INBOXES = Inboxes()  # one per process: a Ray actor is a process


class RemoteChannel:
    """Stands in (in a shipped fragment) for the channel of an exchange whose consumer runs in an actor."""

    def __init__(self, execution_id: str, key: int, producers: int):
        self.execution_id, self.key, self.producers = execution_id, key, producers
        self._inbox: Optional[tuple[ActorExecution, Inbox]] = None

    def __getstate__(self) -> dict:
        return {"execution_id": self.execution_id, "key": self.key, "producers": self.producers, "_inbox": None}

    def get(self, partition: int) -> Optional[Batch]:
        if self._inbox is None:
            self._inbox = INBOXES.inbox(self.execution_id, self.key, partition, self.producers)
        execution, inbox = self._inbox
        batch = inbox.get()
        return None if batch is None else execution.to_backend(batch)


class FeedExec(ExchangeSourceExec):
    """Stands in (in a shipped fragment) for a scan, which runs on the driver and feeds its tuples here."""
