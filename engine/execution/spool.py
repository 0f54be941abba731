"""A spool: tuples kept in memory while the memory budget allows, the rest in a spill file, read back in order.

What holds tuples for later (a query's result before the cursor takes it, a shared subplan's
tuples) appends them to a spool. While its reservation grows, they stay in a list; the first
refused request sends that batch and every later one to a spill file, so the order is kept.
`contents()` is a plain list when nothing spilled (the common, fast case), else the spool itself,
which reads back batch by batch and can be read any number of times. Column batches are kept as
they came (execution/column_batch.py): a spool holding one is its own contents too, and hands
them back as they are, so that a writer takes their stacks without a step per tuple. The spool holds its memory
until it is closed or dropped (a finalizer gives the memory back and removes the file then too).
"""
from __future__ import annotations

import weakref
from typing import Callable, Iterable, Iterator, Optional, Union

import numpy as np

from trdb.errors import InternalError
from trdb.execution.column_batch import is_columns
from trdb.execution.exchange.channel import batch_bytes
from trdb.storage.memory import Reservation
from trdb.storage.spill import READ_BATCH_BYTES, SpillFile

MEMORY_BATCH = 64  # tuples per batch read back from memory
SAMPLED_KEYS = 1 << 16  # a key column of more column-batch tuples is counted from about this many of its values


class RowSpool:
    def __init__(self, reservation: Reservation, new_file: Callable[[], SpillFile], max_memory: Optional[int] = None):
        self.reservation = reservation
        self.max_memory = max_memory  # past this many bytes in memory it spills, even where the budget has room
        self._new_file = new_file
        self._held: list = []  # in memory, in order: lists of tuples (consecutive ones joined) and column batches
        self._flat: Optional[list] = None  # the tuples of a spool holding column batches, once indexed
        self._files: list[SpillFile] = []  # at most one; a list so that the finalizer sees it once made
        self._count = 0
        self._closed = False
        self._release = weakref.finalize(self, _forget, reservation, self._files)

    def append_batch(self, batch: list) -> None:
        if not batch:
            return
        self._count += len(batch)
        if not self._files and self._room_for(batch_bytes(batch)):
            if is_columns(batch):
                self._held.append(batch)
            elif self._held and type(self._held[-1]) is list:
                self._held[-1].extend(batch)
            else:
                self._held.append(list(batch))
            return
        if not self._files:
            self._files.append(self._new_file())
        self.reservation.note_spilled(self._files[0].write(batch))

    def _room_for(self, size: int) -> bool:
        if self.max_memory is not None and self.reservation.held + size > self.max_memory:
            return False
        return self.reservation.try_grow(size)

    def extend(self, batches: Iterable[list]) -> "RowSpool":
        for batch in batches:
            self.append_batch(batch)
        if self._files:
            self._files[0].finish()
        return self

    @property
    def spilled(self) -> bool:
        return bool(self._files)

    @property
    def nbytes(self) -> int:
        """The tuples' size: the bytes held in memory plus those written to the spill file."""
        return self.reservation.held + (self._files[0].bytes if self._files else 0)

    def contents(self) -> Union[list, "RowSpool"]:
        """A list when every tuple is in memory in list batches, else this spool (iterable, sized, `batches()`)."""
        if self._files or any(is_columns(held) for held in self._held):
            return self
        return self._held[0] if self._held else []

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> tuple:
        if self._flat is None:
            self._flat = list(self)
        return self._flat[index]

    def batches(self, batch_bytes_wanted: int = READ_BATCH_BYTES) -> Iterator[list]:
        self._check_open()
        for held in self._held:
            if is_columns(held):
                yield held
                continue
            for start in range(0, len(held), MEMORY_BATCH):
                yield held[start:start + MEMORY_BATCH]
        if self._files:
            yield from self._files[0].batches(batch_bytes_wanted)

    def distinct_keys(self, positions: list[int]) -> list[int]:
        """How many distinct values each of the key columns at `positions` holds (NULL one of them), for the
        planner's estimates: list batches counted tuple by tuple; column batches as arrays, from every k-th
        value where they hold more than SAMPLED_KEYS (the values seen once in the sample stand for as many
        unseen ones in the rest: all distinct stays all distinct, a few repeated values stay few)."""
        stride = max(1, -(-len(self) // SAMPLED_KEYS))
        arrays: list[list[np.ndarray]] = [[] for _ in positions]
        seen: list[set] = [set() for _ in positions]
        in_columns = 0
        for batch in self.batches():
            if is_columns(batch):
                in_columns += len(batch)
            for values, found, position in zip(arrays, seen, positions):
                if is_columns(batch):
                    values.append(batch.columns[position][::stride])
                else:
                    found.update(row[position] for row in batch)
        return [_distinct(values, found, in_columns) for values, found in zip(arrays, seen)]

    def __iter__(self) -> Iterator[tuple]:
        return (row for batch in self.batches() for row in batch)

    def _check_open(self) -> None:
        if self._closed:  # a silent empty read would be a wrong result
            raise InternalError("a spool was read after it was closed")

    def close(self) -> None:
        """Forget the tuples: the spill file is removed and the memory given back."""
        self._closed = True
        self._held, self._flat = [], None
        self._release()


def _forget(reservation: Reservation, files: list) -> None:
    for spill in files:
        spill.remove()
    files.clear()
    reservation.release_all()


FEW_KEYS = 32  # key values counted in a set (np.unique costs about 10 us however few there are)


def _distinct(values: list[np.ndarray], found: set, rows: int) -> int:
    """Distinct values of a column: `values` sampled from `rows` in column batches, `found` the list batches'."""
    sample = np.concatenate(values) if values else np.zeros(0, np.int64)
    if len(sample) == rows and rows <= FEW_KEYS:  # all of a few values: a set, not a sort (a step's one-tuple spools)
        return len(found.union(np.asarray(sample).tolist()))
    distinct, counts = np.unique(sample, return_counts=True)
    estimate = len(distinct)
    if len(sample) < rows:
        estimate = min(rows, round(len(distinct) + int((counts == 1).sum()) * (rows - len(sample)) / len(sample)))
    if not found:
        return estimate
    return estimate + len(found - set(distinct.tolist()))


def row_batches(rows: Union[list, RowSpool], size: int = MEMORY_BATCH) -> Iterator[list]:
    """Batches of a list or a spool alike (for consumers that take either)."""
    if isinstance(rows, RowSpool):
        yield from rows.batches()
        return
    for start in range(0, len(rows), size):
        yield rows[start:start + size]


def joined_batches(batches: Iterable[list], max_rows: int, max_bytes: Optional[int] = None,
                   row_bytes: Optional[Callable[[tuple], int]] = None) -> Iterator[list]:
    """`batches` (of `row_batches`) joined into batches of up to `max_rows` tuples, each ending once it holds
    `max_bytes` (by `row_bytes`) or more: for writers whose every batch costs a statement that reads a table."""
    pending: list = []
    size = 0
    for batch in batches:
        pending.extend(batch)
        if max_bytes is not None:
            size += sum(row_bytes(row) for row in batch)
        if len(pending) >= max_rows or (max_bytes is not None and size >= max_bytes):
            yield pending
            pending, size = [], 0
    if pending:
        yield pending
