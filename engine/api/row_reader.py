"""Reading a result's rows: in order, a bounded batch at a time from a spill, as fetch* hands them to the user."""
from __future__ import annotations

import functools
from typing import Any, Iterator, Optional, Union

import numpy as np

from trdb import errors
from trdb.execution.placed_columns import ColumnBatches, all_column_batches
from trdb.execution.spool import RowSpool
from trdb.kernels.backend import to_host

CURSOR_BATCH_BYTES = 4 << 20  # a spilled result is read back about this many tile bytes at a time


class RowReader:
    """The rows of a result in order, from a list by slicing, from a spilled spool a bounded batch at a time."""

    def __init__(self, rows: Union[list, RowSpool]):
        self.rows = rows
        self.position = 0
        self._batches: Optional[Iterator[list]] = None
        self._pending: list = []

    def take(self, count: Optional[int]) -> list:
        if not isinstance(self.rows, RowSpool):
            end = len(self.rows) if count is None else min(len(self.rows), self.position + count)
            taken = self.rows[self.position:end]
        else:
            taken = self._take_spooled(len(self.rows) - self.position if count is None else count)
        self.position += len(taken)
        return taken

    def take_column_batches(self) -> Optional[ColumnBatches]:
        """Every row, where none was taken yet and all are in column batches held in memory (fetch_tensor places
        their stacks at once); else None, nothing taken."""
        if not isinstance(self.rows, RowSpool) or self.rows.spilled or self.position or self._batches is not None:
            return None
        batches = list(self.rows.batches())
        if not all_column_batches(batches):
            return None
        self.position = len(self.rows)
        return ColumnBatches(batches)

    def _take_spooled(self, count: int) -> list:
        if self._batches is None:
            self._batches = self.rows.batches(CURSOR_BATCH_BYTES)
        taken = []
        while len(taken) < count:
            if not self._pending:
                self._pending = next(self._batches, [])
                if not self._pending:
                    break
            part = self._pending[:count - len(taken)]
            self._pending = self._pending[len(part):]
            taken.extend(part)
        return taken

    def skip(self, count: int) -> None:
        """Pass over `count` rows without handing them over (a spilled result's are read back a batch at a time)."""
        if isinstance(self.rows, RowSpool):
            while count > 0 and (taken := len(self.take(min(count, 256)))):
                count -= taken
        else:
            self.position = min(len(self.rows), self.position + count)

    def rewind(self, position: int) -> None:
        """Back to `position` (a fetch that failed leaves its rows to be fetched). A spooled result is read
        again from its start: the read that failed may have ended its batches (an error ends a generator)."""
        if isinstance(self.rows, RowSpool):
            self._batches, self._pending, self.position = None, [], 0
            while self.position < position:
                self.take(min(position - self.position, 1024))
        self.position = position


def fetching(fetch):
    """A fetch method whose rows stay to be fetched when it runs out of memory, failing as an OperationalError
    (a spooled tile read back, or the rows converted, may need more than the process can allocate now)."""
    @functools.wraps(fetch)
    def guarded(self, *args: Any, **kwargs: Any):
        position = self._reader.position
        try:
            return fetch(self, *args, **kwargs)
        except MemoryError as exc:
            try:
                self._reader.rewind(position)
            except MemoryError:  # reading the rows before `position` again ran out too: none are left to fetch
                self._forget_result()
            raise errors.out_of_memory(exc, hint=f"{fetch.__name__}() needs more memory than the process can "
                                                 "allocate now: fetch fewer rows at a time (fetchmany())") from exc
    return guarded



def nbytes(value: Any) -> int:
    """About how many bytes a fetched value holds (a CSR tile: its stored values and indices)."""
    data = getattr(value, "data", None)
    if hasattr(value, "nnz") and data is not None:
        return int(data.nbytes) * 2
    size = getattr(value, "nbytes", 8)
    return size if isinstance(size, int) else 8


def user_row(row: tuple) -> tuple:
    """`user_value` of each value of a row, keys (ints) and host tiles without a call each (200,000 rows of a key
    and a tile: 0.9 of 1.0 s of fetchall() under the profiler was those calls)."""
    return tuple(v if type(v) is int else (v if v.ndim else v[()]) if type(v) is np.ndarray else user_value(v)
                 for v in row)


def user_value(value: Any) -> Any:
    """A value as fetchone/fetchall give it: a 0-d tensor is a numpy scalar of its dtype (np.float32(16.0)),
    which keeps the dtype `description` reports and sits in a pandas column as a number."""
    value = to_host(value)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]
    return value
