"""The exchange: bounded queues between producer instances and consumer instances (Graefe's exchange).

Producers run a plan fragment in a worker and route each batch to consumer queues; a consumer
reads its queue until every producer has finished. The first error anywhere is kept in the
execution state, cancels everything, and is what every consumer raises.
"""
from __future__ import annotations

import queue
import threading
from typing import Callable, Iterable, Optional

from trdb.execution.operators.operator import Batch, PhysicalOperator
from trdb.execution.state import ExecutionState
from trdb.kernels import sparse

QUEUE_BATCHES = 8          # bounded queues: a fast producer waits for its consumers
POLL_SECONDS = 0.05        # how often a blocked put/get looks at the cancellation flag
_DONE = object()

Router = Callable[[Batch, int], Iterable[tuple[int, Batch]]]


def batch_bytes(batch: Batch) -> int:
    """The bytes a batch moves: its tiles' sizes (a CSR tile's three arrays), 8 for any other value."""
    return sum(sparse.nbytes(v) if sparse.is_sparse(v) else getattr(v, "nbytes", 8) for row in batch for v in row)


class Channel:
    """M bounded queues fed by `producers` producer instances."""

    def __init__(self, consumers: int, producers: int, state: ExecutionState):
        self.queues = [queue.Queue(QUEUE_BATCHES) for _ in range(consumers)]
        self.waiting = [producers] * consumers
        self.state = state
        self.tuples = 0
        self.bytes = 0
        self._lock = threading.Lock()

    def put(self, partition: int, item) -> None:
        target = self.queues[partition]
        while True:
            try:
                target.put(item, timeout=POLL_SECONDS)
                return
            except queue.Full:
                self.state.raise_if_cancelled()

    def account(self, batch: Batch, copies: int) -> None:
        size = batch_bytes(batch)
        with self._lock:
            self.tuples += len(batch) * copies
            self.bytes += size * copies

    def producer_done(self) -> None:
        for partition in range(len(self.queues)):
            try:
                self.put(partition, _DONE)
            except BaseException:
                return  # cancelled: consumers stop on the flag, not on the markers

    def get(self, partition: int) -> Optional[Batch]:
        source = self.queues[partition]
        while self.waiting[partition]:
            try:
                item = source.get(timeout=POLL_SECONDS)
            except queue.Empty:
                self.state.raise_if_cancelled()
                continue
            if item is _DONE:
                self.waiting[partition] -= 1
                continue
            return item
        self.state.raise_if_failed()  # a producer that failed also signs off: its error must not be lost
        return None


def produce(operator: PhysicalOperator, ctx, channel: Channel, route: Router, consumers: int) -> None:
    """A producer's whole life in its worker: run the fragment, route its batches, then sign off."""
    try:
        operator.open(ctx)
        while True:
            batch = operator.next_batch()
            if batch is None:
                break
            for partition, rows in route(batch, consumers):
                channel.account(rows, 1)
                channel.put(partition, rows)
    except BaseException as exc:  # the first error cancels the whole execution
        ctx.state.fail(exc)
    finally:
        try:
            operator.close()
        except BaseException as exc:
            ctx.state.fail(exc)
        channel.producer_done()


class ExchangeSourceExec(PhysicalOperator):
    """The consumer side of an exchange: one instance per output partition. A subclass says, in
    `router(spec)`, how its producers send each batch to the consumers."""

    @staticmethod
    def router(spec) -> Router:
        raise NotImplementedError

    def __init__(self, channel: Channel, partition: int, detail: str = ""):
        super().__init__()
        self.channel = channel
        self.partition = partition
        self.detail = detail

    def _next(self) -> Optional[Batch]:
        return self.channel.get(self.partition)
