"""SortExec: orders tuples by key columns (NULLs last ascending, first descending, as in PostgreSQL); an external sort.

Tuples are held while the operator's reservation grows; when it is refused, what is held is sorted
and written to a spill file (a run), and the rows that follow start a new run. At the end the runs
are merged (heapq.merge: stable, so equal keys keep their input order, as the in-memory sort
does), at most MERGE_FAN_IN at a time, and the merged rows stream out. Column batches held in memory
are sorted as columns (tile_math/column_sort.py: one lexsort, the same order) and handed on as such.
"""
from __future__ import annotations

import heapq
from typing import Callable, Iterable, Iterator, Optional

import numpy as np

from trdb.execution.column_batch import is_columns
from trdb.execution.exchange.channel import batch_bytes
from trdb.execution.operators.operator import Batch, BlockingOperator, PhysicalOperator, batches
from trdb.execution.tile_math.column_sort import sorted_batches
from trdb.kernels.backend import to_host
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.kernels.sparse import is_sparse
from trdb.storage.memory import Reservation
from trdb.storage.spill import READ_BATCH_BYTES, SpillFile

MERGE_FAN_IN = 16          # runs merged at once (each holds a read buffer and a batch); more take several passes
MIN_READ_BYTES = 64 << 10  # a run is read back in batches of at least this many tile bytes
RUN_WRITE_ROWS = 256       # rows per write to a run


class Descending:
    """A sort key that orders the other way (for merging runs on keys that are not all ascending)."""

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key

    def __lt__(self, other: "Descending") -> bool:
        return other.key < self.key

    def __eq__(self, other) -> bool:
        return self.key == other.key


class SortExec(BlockingOperator):
    def __init__(self, child: PhysicalOperator, positions: tuple[int, ...], descending: tuple[bool, ...],
                 nulls_first: Optional[tuple[bool, ...]] = None):
        super().__init__()
        self.children = (child,)
        self.positions = positions
        self.descending = descending
        # NULL sorts above every value where it goes last ascending or first descending (PostgreSQL's default)
        self.nulls_high = tuple(first == down for first, down in zip(nulls_first or descending, descending))

    def _output(self) -> Iterator[Batch]:
        held, runs, memory = self._read()
        ordered = sorted_batches(held, self.positions, self.descending, self.nulls_high) if not runs else None
        if ordered is not None:
            held = []  # the sorted columns hold the tuples now
            yield from ordered
            return
        rows = _tuples(held)
        self._sort(rows)
        if not runs:
            yield from batches(rows)
            return
        runs.append(write_run(self.spill_file, memory, rows))
        memory.release_all()
        yield from self._streamed(on_backend(self.ctx.backend,
                                             merge_runs(runs, self.merge_key(), self.spill_file, memory)))

    def _read(self) -> tuple[list, list, Reservation]:
        """The input: the batches held in memory (the last run's), the sorted runs written to spill files."""
        memory = self.reservation()
        held: list = []
        runs: list[SpillFile] = []
        child = self.children[0]
        while (batch := child.next_batch()) is not None:
            size = _estimated_bytes(batch)
            if not memory.try_grow(size):
                if held:
                    rows = _tuples(held)
                    self._sort(rows)
                    runs.append(write_run(self.spill_file, memory, rows))
                    held = []
                memory.release_all()
                memory.grow(size)  # one batch is always held: progress beats the limit
            held.append(batch)
        return held, runs, memory

    def _sort(self, rows: list) -> None:
        # stable sorts from the last key to the first give the full ordering
        for position, descending, high in reversed(list(zip(self.positions, self.descending, self.nulls_high))):
            rows.sort(key=lambda r: order_key(r[position], high), reverse=descending)

    def merge_key(self) -> Callable[[tuple], tuple]:
        """One key for the whole ordering: the in-memory sort's keys, descending ones reversed."""
        parts = list(zip(self.positions, self.descending, self.nulls_high))

        def key(row: tuple) -> tuple:
            out = []
            for position, descending, high in parts:
                part = order_key(row[position], high)
                out.append(Descending(part) if descending else part)
            return tuple(out)
        return key


def order_key(value, nulls_high: bool = True) -> tuple:
    """A sort key's place: NULLs after every value (`nulls_high`, else before), NaN after every number (as
    PostgreSQL orders them); a tile of one value (ORDER BY SUMSQ(A.v)) by that value."""
    if value is None:
        return (2 if nulls_high else -1, 0)
    if type(value) is not int:
        value = np.asarray(to_host(value)).reshape(-1)[0].item()
        if value != value:
            return (1, 0)
    return (0, value)


def _estimated_bytes(batch: list) -> int:
    """About the bytes a batch holds: a column batch's own count, else from its first and last rows (counting
    every row would cost the in-memory sort a third of its time; the rows of one batch are alike)."""
    if is_columns(batch, nulls=True):
        return batch.nbytes
    return len(batch) * batch_bytes([batch[0], batch[-1]]) // 2


def _tuples(held: list) -> list:
    """The tuples of the batches held, in one list."""
    return [row for batch in held for row in batch]


def write_run(new_file: Callable[[str], SpillFile], memory: Reservation, rows: Iterable[tuple]) -> SpillFile:
    """Rows (already in order) written to a new spill file; the bytes count as `memory`'s spill."""
    run = new_file("run")
    batch = []
    for row in rows:
        batch.append(row)
        if len(batch) == RUN_WRITE_ROWS:
            memory.note_spilled(run.write(batch))
            batch = []
    if batch:
        memory.note_spilled(run.write(batch))
    run.finish()
    return run


def merge_runs(runs: list[SpillFile], key: Callable, new_file: Callable[[str], SpillFile],
               memory: Reservation) -> Iterator[tuple]:
    """The rows of sorted runs in one order; with more than MERGE_FAN_IN runs, consecutive ones are
    merged into longer runs first (consecutive: equal keys keep the order of the runs)."""
    while len(runs) > MERGE_FAN_IN:
        longer = []
        for start in range(0, len(runs), MERGE_FAN_IN):
            group = runs[start:start + MERGE_FAN_IN]
            longer.append(write_run(new_file, memory, _merge(group, key)))
            for run in group:
                run.remove()
        runs = longer
    yield from _merge(runs, key)
    for run in runs:
        run.remove()


def _merge(runs: list[SpillFile], key: Callable) -> Iterator[tuple]:
    read_bytes = max(MIN_READ_BYTES, READ_BATCH_BYTES // max(1, len(runs)))
    return heapq.merge(*(_rows(run, read_bytes) for run in runs), key=key)


def _rows(run: SpillFile, read_bytes: int) -> Iterator[tuple]:
    for batch in run.batches(read_bytes):
        yield from batch


def on_backend(backend, rows: Iterator[tuple]) -> Iterator[tuple]:
    """Rows read back from spill files (tiles in host memory) with their tiles on the query's backend."""
    if backend is NUMPY_BACKEND:
        return rows
    return (tuple(backend.asarray(v) if isinstance(v, np.ndarray) or is_sparse(v) else v for v in row)
            for row in rows)
