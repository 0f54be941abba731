"""The exchange: bounded queues between producer instances and consumer instances (Graefe's exchange).

Producers run a plan fragment in a worker and route each batch to consumer queues; a consumer
reads its queue until every producer has finished. The first error anywhere is kept in the
execution state, cancels everything, and is what every consumer raises.

A queue is bounded in batches and in bytes: a producer waits while its consumer's queue holds its
byte share, and the bytes queued are reserved from the database's memory budget. An empty queue
always takes one batch, however large, so a batch beyond the share slows its exchange down but
never stops it.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Callable, Iterable, Optional

import numpy as np

from trdb.execution.column_batch import is_columns
from trdb.execution.operators.operator import Batch, PhysicalOperator
from trdb.execution.state import ExecutionState
from trdb.kernels import sparse
from trdb.storage.memory import MemoryManager, Reservation

QUEUE_BATCHES = 8          # bounded queues: a fast producer waits for its consumers ...
QUEUE_BYTES = 64 << 20     # ... and while a queue holds this many bytes ...
QUEUE_SHARE = 8            # ... or its part of 1/QUEUE_SHARE of the memory budget, if less
POLL_SECONDS = 0.05        # how often a blocked put/get looks at the cancellation flag
_DONE = object()

Router = Callable[[Batch, int], Iterable[tuple[int, Batch]]]


def row_bytes(row: tuple) -> int:
    """The bytes a tuple holds: its tiles' sizes (a CSR tile's three arrays), 8 for any other value."""
    total = 0
    for value in row:  # asked of every tuple a scan or an exchange hands on: the usual cases first
        kind = type(value)
        if kind is int:
            total += 8
        elif kind is np.ndarray:
            total += value.nbytes
        else:
            total += sparse.nbytes(value) if sparse.is_sparse(value) else getattr(value, "nbytes", 8)
    return total


def batch_bytes(batch: Batch) -> int:
    """The bytes a batch moves."""
    if is_columns(batch, nulls=True):
        return batch.nbytes
    return sum(row_bytes(row) for row in batch)


class Channel:
    """M queues, bounded in batches and bytes, fed by `producers` producer instances."""

    def __init__(self, consumers: int, producers: int, state: ExecutionState,
                 memory: Optional[MemoryManager] = None):
        self.queues: list[deque] = [deque() for _ in range(consumers)]   # (batch, bytes) pairs
        self.queued = [0] * consumers        # bytes in each queue
        self.peaks = [0] * consumers         # the most bytes each queue held, for EXPLAIN ANALYZE
        self.closed = [False] * consumers    # a closed consumer's batches are dropped
        self.waiting = [producers] * consumers
        self.state = state
        self.share = QUEUE_BYTES
        self.tuples = 0
        self.bytes = 0
        self._memory: Optional[Reservation] = None
        self._changed = threading.Condition()
        if memory is not None:
            self.use_memory(memory)

    def use_memory(self, memory: MemoryManager) -> None:
        """Reserve the queued bytes from `memory` (the database's budget), which also sizes each queue's share."""
        with self._changed:
            if self._memory is None:
                self._memory = memory.reservation("exchange")
                self.share = max(1, min(QUEUE_BYTES, memory.budget // (QUEUE_SHARE * len(self.queues))))

    def put(self, partition: int, item, size: Optional[int] = None) -> None:
        """Queue a batch for a consumer, waiting while its queue is full."""
        size = batch_bytes(item) if size is None else size
        with self._changed:
            while not self._admits(partition, size):
                self._changed.wait(POLL_SECONDS)
                self.state.raise_if_cancelled()
            if self.closed[partition]:
                return
            self._append(partition, item, size)

    def _admits(self, partition: int, size: int) -> bool:
        """Whether a batch of `size` bytes may join the queue now (then its bytes are reserved)."""
        queue = self.queues[partition]
        if self.closed[partition]:
            return True
        if not queue:  # always one batch, or a batch larger than the share would wait for ever
            if self._memory is not None:
                self._memory.grow(size)
            return True
        if len(queue) >= QUEUE_BATCHES or self.queued[partition] + size > self.share:
            return False
        return self._memory is None or self._memory.try_grow(size)

    def _append(self, partition: int, item, size: int) -> None:
        self.queues[partition].append((item, size))
        self.queued[partition] += size
        self.peaks[partition] = max(self.peaks[partition], self.queued[partition])
        self._changed.notify_all()

    def account(self, batch: Batch, copies: int, size: Optional[int] = None) -> None:
        size = batch_bytes(batch) if size is None else size
        with self._changed:
            self.tuples += len(batch) * copies
            self.bytes += size * copies

    def producer_done(self) -> None:
        """A producer has ended: its marker joins every queue without waiting for room."""
        with self._changed:
            for queue in self.queues:
                queue.append((_DONE, 0))
            self._changed.notify_all()

    def get(self, partition: int) -> Optional[Batch]:
        with self._changed:
            while True:
                item = self._pop(partition)
                if item is _DONE:
                    self.waiting[partition] -= 1
                elif item is not None:
                    return item
                elif not self.waiting[partition]:
                    break
                else:
                    self._changed.wait(POLL_SECONDS)
                    self.state.raise_if_cancelled()
        self.state.raise_if_failed()  # a producer that failed also signs off: its error must not be lost
        return None

    def _pop(self, partition: int):
        queue = self.queues[partition]
        if not queue:
            return None
        item, size = queue.popleft()
        self._give_back(partition, size)
        return item

    def _give_back(self, partition: int, size: int) -> None:
        self.queued[partition] -= size
        if self._memory is not None:
            self._memory.shrink(size)
        self._changed.notify_all()

    def close_partition(self, partition: int) -> None:
        """The consumer of `partition` has closed: what waits for it is dropped, and so is what comes later."""
        with self._changed:
            self.closed[partition] = True
            dropped = sum(size for _, size in self.queues[partition])
            self.queues[partition].clear()
            self._give_back(partition, dropped)


def produce(operator: PhysicalOperator, ctx, channel: Channel, route: Router, consumers: int) -> None:
    """A producer's whole life in its worker: run the fragment, route its batches, then sign off."""
    try:
        channel.use_memory(ctx.memory)
        operator.open(ctx)
        while True:
            batch = operator.next_batch()
            if batch is None:
                break
            for partition, rows in route(batch, consumers):
                size = batch_bytes(rows)
                channel.account(rows, 1, size)
                channel.put(partition, rows, size)
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

    def _close(self) -> None:
        close = getattr(self.channel, "close_partition", None)  # a Ray actor's inbox has its own bounds
        if close is not None:
            close(self.partition)
            self.metrics.peak_memory = max(self.metrics.peak_memory, self.channel.peaks[self.partition])
