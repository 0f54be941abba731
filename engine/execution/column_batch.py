"""ColumnBatch: a batch of tuples held as columns, an int64 array per key column and each tile column's tiles
stacked in one array `(n, *tile)`; operators that go tuple by tuple read it as a sequence of tuples.

Operators that work on columns (a scan of stored tiles, the stacked aggregates and projections, the
writers) take the arrays as they are: one kernel call, one reduction or one insert a batch, with no
Python step per tuple. Every other operator sees what a list batch gives: tuples of Python ints and
tile arrays (views of the stacks, 0-d for 0-d tiles), built once when first asked for.

An outer join's missing side has NULL keys: those columns are numpy masked arrays (masked where NULL; the
tuples read None there), its tiles zeros as a tuple's are. A batch holding one is a MaskedBatch, which
`is_columns` does not take for a column batch: an operator that reads columns without minding masks sees
its tuples; those that mind them ask `is_columns(batch, nulls=True)`.
"""
from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence, Union

import numpy as np

from trdb.storage.tile_runs import tile_views

# A column batch holds at most COLUMN_BATCH_ROWS tuples and about COLUMN_BATCH_BYTES of columns (`batch_rows`):
# operators spend tens of microseconds of Python on each batch whatever it holds, so tuples of a few values go in
# large batches (a linear regression's step over 200,000 rows of 8: 35 ms at 4,096 a batch, 20 ms at 65,536),
# while tuples of larger tiles keep a batch's memory bounded
COLUMN_BATCH_ROWS = 65536
COLUMN_BATCH_BYTES = 4 << 20
SMALL_TILE_BYTES = 16 << 10  # tiles up to this size are worth stacking (4,096 float32: a kernel call's worth)


def batch_rows(row_bytes: int) -> int:
    """The tuples of `row_bytes` each (their columns' bytes) that one column batch takes: at least one."""
    return max(1, min(COLUMN_BATCH_ROWS, COLUMN_BATCH_BYTES // max(1, int(row_bytes))))


def columns_row_bytes(columns: Sequence[np.ndarray]) -> int:
    """The bytes of one tuple of these columns (a key's item, a tile's elements)."""
    return sum(c.itemsize * (int(np.prod(c.shape[1:])) if c.ndim > 1 else 1) for c in columns)


class ColumnBatch(Sequence):
    """`columns[c]`: an int64 array `(n,)` for a key column, a stack `(n, *tile)` for a tile column
    (`is_tile[c]`)."""

    __slots__ = ("columns", "is_tile", "_rows")

    def __new__(cls, columns: Sequence[np.ndarray] = (), is_tile: Sequence[bool] = ()):
        """A MaskedBatch where a column is NULL somewhere (a masked array), else a ColumnBatch."""
        nulls = any(type(c) is np.ma.MaskedArray and np.ma.getmask(c) is not np.ma.nomask and c.mask.any()
                    for c in columns)
        return object.__new__(MaskedBatch if nulls else ColumnBatch)

    def __init__(self, columns: Sequence[np.ndarray], is_tile: Sequence[bool]):
        # a masked array that is NULL nowhere is its plain data: only a MaskedBatch holds masks
        self.columns = tuple(c.data if type(c) is np.ma.MaskedArray and type(self) is ColumnBatch else c
                             for c in columns)
        self.is_tile = tuple(is_tile)
        self._rows: Optional[list[tuple]] = None

    def __reduce__(self) -> tuple:  # pickled (to a Ray actor, a spill file) without the tuples built from it
        return ColumnBatch, (self.columns, self.is_tile)

    def __len__(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    def __getitem__(self, index: Union[int, slice]) -> Any:
        if isinstance(index, slice):
            return ColumnBatch([column[index] for column in self.columns], self.is_tile)
        return self.rows()[index]

    def __iter__(self) -> Iterator[tuple]:
        return iter(self.rows())

    def take(self, positions: np.ndarray) -> "ColumnBatch":
        """The tuples at `positions`, in that order, as a column batch."""
        if len(positions) == len(self) and (len(positions) == 0 or np.array_equal(positions, np.arange(len(self)))):
            return self
        return ColumnBatch([column[positions] for column in self.columns], self.is_tile)

    def rows(self) -> list[tuple]:
        """The tuples, as a list batch holds them."""
        if self._rows is None:
            self._rows = list(zip(*(_values(column, tile) for column, tile in zip(self.columns, self.is_tile))))
        return self._rows

    @property
    def nbytes(self) -> int:
        """The bytes the tuples hold: the tiles' sizes, 8 for each key."""
        return sum(int(column.nbytes) if tile else 8 * len(column)
                   for column, tile in zip(self.columns, self.is_tile))

    def keys(self) -> list[np.ndarray]:
        """The key columns' arrays, in order."""
        return [column for column, tile in zip(self.columns, self.is_tile) if not tile]

    def __repr__(self) -> str:
        shapes = ", ".join(f"{c.shape[1:]}" if t else "key" for c, t in zip(self.columns, self.is_tile))
        return f"ColumnBatch({len(self)} tuples: {shapes})"


class MaskedBatch(ColumnBatch):
    """A column batch some of whose non-tile columns are NULL somewhere: masked arrays (an outer join's keys)."""

    __slots__ = ()


def _values(column: np.ndarray, tile: bool) -> list:
    return tile_views(column) if tile else column.tolist()  # a masked array's list holds None where it is NULL


def to_columns(batch: Any, nulls: bool = False) -> Optional[ColumnBatch]:
    """A list batch as a column batch, where every tuple holds ints and small dense numpy tiles (up to
    SMALL_TILE_BYTES: larger ones gain nothing and would be copied) at the same places, the tiles of each
    column of one shape and dtype; else None. A MaskedBatch is taken as it is where `nulls` says masks are
    minded."""
    if type(batch) is ColumnBatch or (nulls and type(batch) is MaskedBatch):
        return batch
    if not batch:
        return None
    first = batch[0]
    is_tile = tuple(type(v) is np.ndarray for v in first)
    if not all(t or type(v) is int for v, t in zip(first, is_tile)) or \
            any(t and v.nbytes > SMALL_TILE_BYTES for v, t in zip(first, is_tile)):
        return None
    columns = []
    for position, tile in enumerate(is_tile):
        values = [row[position] for row in batch]
        if tile:
            if not all(type(v) is np.ndarray and v.shape == first[position].shape and v.dtype == first[position].dtype
                       for v in values):
                return None
            columns.append(np.stack(values))
        else:
            if not all(type(v) is int for v in values):
                return None
            try:
                columns.append(np.array(values, dtype=np.int64))
            except OverflowError:  # beyond int64: the tuples stay tuples
                return None
    return ColumnBatch(columns, is_tile)


def is_columns(batch: Any, nulls: bool = False) -> bool:
    """Whether a batch is a column batch; a MaskedBatch only where `nulls` (the caller minds masks)."""
    return type(batch) is ColumnBatch or (nulls and type(batch) is MaskedBatch)
