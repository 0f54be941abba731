"""The Volcano operator interface (open / next_batch / close) and the context operators run in."""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Optional

from trdb.execution import work
from trdb.execution.state import ExecutionState
from trdb.execution.work import Work
from trdb.kernels.backend import Backend
from trdb.storage.memory import MemoryManager, Reservation, default_manager
from trdb.storage.spill import SpillDirectory, SpillFile, default_directory

Batch = list  # a list of tuples: keys as Python ints (None on an outer join's missing side), tiles as arrays
BATCH_SIZE = 64


@dataclass
class ExecContext:
    """What running operators share: the kernel backend, the catalog (tiles), and the execution state."""

    backend: Backend
    catalog: Any
    state: ExecutionState = field(default_factory=ExecutionState)
    memory: MemoryManager = field(default_factory=default_manager)  # the database's budget
    spill: Optional[SpillDirectory] = None                          # where operators spill beyond it
    canvas: Any = None  # a ResultCanvas (execution/result_canvas.py) the result's last aggregate writes into
    host_memory: Optional[MemoryManager] = None  # the host's budget, where `memory` is a GPU's
    count_work: bool = True  # FLOPs and bytes charged to each operator (execution/work.py): EXPLAIN ANALYZE's

    @property
    def host_budget(self) -> MemoryManager:
        """The budget of what lives in host memory whatever the device (a read decoded from DuckDB or
        Parquet before it moves): `memory`, or memory_limit's where `memory` is a GPU's."""
        return self.host_memory or self.memory

    def check_cancelled(self) -> None:
        self.state.raise_if_cancelled()

    def spill_file(self, purpose: str) -> SpillFile:
        if self.spill is None:
            self.spill = SpillDirectory(default_directory(None))
        return self.spill.new_file(purpose)


@dataclass
class OperatorMetrics:
    tuples: int = 0
    seconds: float = 0.0
    peak_memory: int = 0     # the most bytes the operator's reservation held
    spilled_bytes: int = 0   # bytes it wrote to spill files
    work: Work = field(default_factory=Work)  # FLOPs and bytes of the kernels it ran (execution/work.py)


class PhysicalOperator:
    """A Volcano operator. Subclasses implement _open, _next and optionally _close."""

    reads_tiles = False  # a scan of stored tiles or kept tuples: what the statement's progress counts as read
    children: tuple["PhysicalOperator", ...] = ()

    def __init__(self) -> None:
        self.metrics = OperatorMetrics()
        self.ctx: Optional[ExecContext] = None

    @property
    def name(self) -> str:
        return type(self).__name__

    def reservation(self, minimum: int = 0) -> Reservation:
        """This operator's share of the memory budget (for state that grows with its input); its peak and
        spill are reported by EXPLAIN ANALYZE. Release it in `_close`, through `release_reservation`."""
        reservation = self.ctx.memory.reservation(self.name, minimum)
        self._reservations = getattr(self, "_reservations", []) + [reservation]
        return reservation

    def release_reservations(self) -> None:
        for reservation in getattr(self, "_reservations", ()):
            self.metrics.peak_memory = max(self.metrics.peak_memory, reservation.peak)
            self.metrics.spilled_bytes += reservation.spilled
            reservation.spilled = 0
            reservation.release_all()
        self._reservations = []

    def open(self, ctx: ExecContext) -> None:
        self.ctx = ctx
        for child in self.children:
            child.open(ctx)
        self._open()

    def next_batch(self) -> Optional[Batch]:
        """The next non-empty batch of tuples, or None when the operator is exhausted."""
        self.ctx.check_cancelled()
        started = time.perf_counter()
        if self.ctx.count_work:
            outer = work.swap(self.metrics.work)
            try:
                batch = self._next()
            finally:
                work.swap(outer)
        else:  # no one reads the counts (a kernel call then charges nothing: no operator's work is current)
            batch = self._next()
        self.metrics.seconds += time.perf_counter() - started
        if batch is not None:
            self.metrics.tuples += len(batch)
            if self.reads_tiles and self.ctx.state.progress is not None:
                self.ctx.state.progress.tiles_read += len(batch)
        return batch

    def close(self) -> None:
        try:
            self._close()
        finally:
            self.release_reservations()
            for child in self.children:
                child.close()

    def _open(self) -> None:
        pass

    def _next(self) -> Optional[Batch]:
        raise NotImplementedError

    def _close(self) -> None:
        pass


class BlockingOperator(PhysicalOperator):
    """An operator that reads all its input before its first output (aggregate, sort, retile):
    subclasses say how to compute the result (`_compute`: a list of rows, or an iterator that streams
    them, e.g. merged back from spill files); it is handed out in batches. A subclass that can hand
    on rows before its input ends (an aggregate's complete groups) makes its batches itself (`_output`).
    Spill files made through `spill_file` are removed at close whatever happened (end, LIMIT, error,
    cancellation)."""

    _batches: Optional[Iterator[Batch]] = None  # what _close reads is set before _open runs: a Ctrl-C
    _spill_files: tuple | list = ()             # can stop _open anywhere, and close follows

    def _open(self) -> None:
        self._batches = None
        self._spill_files = []

    def _next(self) -> Optional[Batch]:
        if self._batches is None:
            self._batches = self._output()
        return next(self._batches, None)

    def _output(self) -> Iterator[Batch]:
        """The result in batches; a subclass that hands on rows before its input ends says where batches end."""
        rows = self._compute()
        if isinstance(rows, Batches):  # made as batches already (column batches of stacks)
            return (batch for batch in rows)
        return batches(rows) if isinstance(rows, list) else self._streamed(iter(rows))

    @staticmethod
    def _streamed(rows: Iterator[tuple]) -> Iterator[Batch]:
        try:
            while batch := list(itertools.islice(rows, BATCH_SIZE)):
                yield batch
        finally:
            close = getattr(rows, "close", None)
            if close is not None:  # a generator: its clean-up (spill files) runs now
                close()

    def _compute(self) -> Iterable[tuple]:
        """The result's rows (a list, or an iterator that streams them), or its batches as a `Batches`."""
        raise NotImplementedError

    def spill_file(self, purpose: str) -> SpillFile:
        """A new spill file that lives until this operator closes."""
        spill = self.ctx.spill_file(purpose)
        self._spill_files.append(spill)
        return spill

    def _close(self) -> None:
        output, self._batches = self._batches, None
        try:
            if output is not None:
                output.close()  # a streaming _compute's own clean-up runs now, not at garbage collection
        except ValueError:
            pass  # still running in another thread (a cancellation): the files go below all the same
        finally:
            files, self._spill_files = self._spill_files, []
            for spill in files:
                spill.remove()


def drain(operator: PhysicalOperator) -> Iterator[tuple]:
    """Every tuple an (opened) operator produces."""
    while True:
        batch = operator.next_batch()
        if batch is None:
            return
        yield from batch


class Batches(list):
    """What a BlockingOperator's `_compute` gives where it made the batches itself (column batches of stacks)."""


def batches(rows: list, size: int = BATCH_SIZE) -> Iterator[Batch]:
    for start in range(0, len(rows), size):
        yield rows[start:start + size]
