"""An inner equi-join of column batches by whole arrays: the build side's keys sorted once, each probe batch's
keys looked up by binary search, and the tuples gathered by the index arrays (late materialization).

A hash join builds a Python dict and probes it a tuple at a time: a microsecond or more a tuple, which
over a million small tuples (one embedding each) is most of a query's time. Where the build side came
as column batches whose join keys are integer columns, its key rows are numbered by their place in the
box their values span (one int64 each), sorted once, and a probe batch's numbers are found with
`searchsorted`: each probe tuple meets the run of build tuples with its key (any number of them), and
the output columns are the probe's and the build's columns taken at those positions. Unique build keys
that fill much of their box (a tensor's tiles) are found by one lookup in an array over the box instead,
and a probe batch whose every tuple meets one keeps its own columns as they are.
"""
from __future__ import annotations

import math
from typing import Iterator, Optional

import numpy as np

from trdb.execution.bounded_ranges import bounded_ranges
from trdb.execution.column_batch import COLUMN_BATCH_ROWS, ColumnBatch

LOOKUP_SHARE = 4  # build keys that fill at least a quarter of their box are found by one array lookup


class ColumnTable:
    """The build side of a join as columns: every column's arrays joined, the key rows sorted."""

    def __init__(self, batches: list[ColumnBatch], keys: tuple[int, ...]):
        first = batches[0]
        self.is_tile = first.is_tile
        self.columns = [np.concatenate([b.columns[c] for b in batches]) for c in range(len(first.columns))]
        key_columns = [self.columns[k] for k in keys]
        low = [int(c.min()) if len(c) else 0 for c in key_columns]
        spans = [int(c.max()) - first + 1 if len(c) else 1 for c, first in zip(key_columns, low)]  # Python ints
        self.boxed = math.prod(spans) < 2 ** 62  # every point of the box numbered in an int64
        if not self.boxed:
            return
        self.low, self.spans = np.array(low, dtype=np.int64), np.array(spans, dtype=np.int64)
        self.high = np.array([first + span - 1 for first, span in zip(low, spans)], dtype=np.int64)
        numbers = _numbers(key_columns, self.low, self.spans, len(self))
        self.order = np.argsort(numbers, kind="stable")
        self.sorted = numbers[self.order]
        self.lookup: Optional[np.ndarray] = None  # each number's build row (-1: none), where keys are unique
        box = math.prod(spans)
        if box <= LOOKUP_SHARE * max(len(self), 1) and not (self.sorted[1:] == self.sorted[:-1]).any():
            self.lookup = np.full(box, -1, dtype=np.int64)
            self.lookup[numbers] = np.arange(len(self), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    def rows(self) -> list[tuple]:
        return ColumnBatch(self.columns, self.is_tile).rows()

    def probe(self, batch: ColumnBatch, keys: tuple[int, ...]) -> Iterator[ColumnBatch]:
        """The joined tuples (probe columns, then build columns) of a probe batch, in parts of about
        COLUMN_BATCH_ROWS tuples (a probe tuple may meet many build tuples)."""
        key_columns = [batch.columns[k] for k in keys]
        inside = np.ones(len(batch), dtype=bool)
        for column, low, high in zip(key_columns, self.low, self.high):
            inside &= (column >= low) & (column <= high)  # no subtraction: it could wrap around
        numbers = _numbers([np.where(inside, c, low) for c, low in zip(key_columns, self.low)], self.low, self.spans,
                           len(batch))
        if self.lookup is not None:  # unique build keys: one build row or none for each probe tuple
            yield from self._probe_unique(batch, np.where(inside, self.lookup[numbers], -1))
            return
        start = np.searchsorted(self.sorted, numbers, side="left")
        counts = np.where(inside, np.searchsorted(self.sorted, numbers, side="right") - start, 0)
        for low_row, high_row in _parts(counts):
            part_counts = counts[low_row:high_row]
            total = int(part_counts.sum())
            if total == 0:
                continue
            probe_rows = low_row + np.repeat(np.arange(high_row - low_row), part_counts)
            offsets = np.arange(total) - np.repeat(np.cumsum(part_counts) - part_counts, part_counts)
            build_rows = self.order[np.repeat(start[low_row:high_row], part_counts) + offsets]
            yield ColumnBatch([c[probe_rows] for c in batch.columns] + [c[build_rows] for c in self.columns],
                              batch.is_tile + self.is_tile)


    def _probe_unique(self, batch: ColumnBatch, build_rows: np.ndarray) -> Iterator[ColumnBatch]:
        """The joined tuples where each probe tuple meets the build row `build_rows` names (-1: none); a probe
        batch whose every tuple meets one is handed on with its own columns as they are (no copy)."""
        met = build_rows >= 0
        if met.all():
            probe_columns = list(batch.columns)
        else:
            probe_rows = np.flatnonzero(met)
            if not len(probe_rows):
                return
            build_rows = build_rows[probe_rows]
            probe_columns = [c[probe_rows] for c in batch.columns]
        yield ColumnBatch(probe_columns + [c[build_rows] for c in self.columns], batch.is_tile + self.is_tile)


def joinable(batch, keys: tuple[int, ...]) -> bool:
    """Whether a batch can take part in a column join on `keys`: a column batch whose keys are int columns."""
    return type(batch) is ColumnBatch and not any(batch.is_tile[k] for k in keys) and \
        all(batch.columns[k].dtype.kind in "iu" for k in keys)


def _numbers(columns: list[np.ndarray], low: np.ndarray, spans: np.ndarray, rows: int) -> np.ndarray:
    """Each key row's number in the box [low, low + spans) (row-major); all 0 with no key columns."""
    out = np.zeros(rows, dtype=np.int64)
    for column, first, span in zip(columns, low, spans):
        out = out * span + (column.astype(np.int64) - first)
    return out


def _parts(counts: np.ndarray) -> Iterator[tuple[int, int]]:
    """Consecutive probe rows whose matches add up to about COLUMN_BATCH_ROWS (at least one row each)."""
    if int(counts.sum()) <= COLUMN_BATCH_ROWS:
        return iter([(0, len(counts))])
    return bounded_ranges(counts, COLUMN_BATCH_ROWS)


def build_table(batches: list, keys: tuple[int, ...]) -> Optional[ColumnTable]:
    """The column table of a build side that came as column batches of one layout, or None."""
    if not batches or not all(joinable(b, keys) for b in batches):
        return None
    first = batches[0]
    if any(b.is_tile != first.is_tile or
           any(t and (b.columns[c].shape[1:] != first.columns[c].shape[1:] or b.columns[c].dtype != first.columns[c].dtype)
               for c, t in enumerate(b.is_tile))
           for b in batches):
        return None
    table = ColumnTable(batches, keys)
    return table if table.boxed else None
