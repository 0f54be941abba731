"""An inner equi-join of column batches by whole arrays: the build side's keys sorted once, each probe batch's
keys looked up by binary search, and the tuples gathered by the index arrays (late materialization).

A hash join builds a Python dict and probes it a tuple at a time: a microsecond or more a tuple, which
over a million small tuples (one embedding each) is most of a query's time. Where the build side came
as column batches whose join keys are integer columns, its key rows are numbered by their place in the
box their values span (one int64 each), sorted once, and a probe batch's numbers are found with
`searchsorted`: each probe tuple meets the run of build tuples with its key (any number of them), and
the output columns are the probe's and the build's columns taken at those positions. Unique build keys
that fill much of their box (a tensor's tiles) are found by one lookup in an array over the box instead,
and a probe batch whose every tuple meets one keeps its own columns as they are. A build side of one tuple (a
tensor of one tile: a small model's weights, a lineage join of one tuple) is neither numbered nor sorted: its key
is compared with the probe keys (the numbering's dozen array calls cost more than the join of one tuple), and its
tiles go beside the probe tuples as one read-only broadcast view each, not a copy a tuple (a weight's product with
every row is then one GEMM: batched_kernels.stacked_product).

A LEFT or FULL join hands on each probe tuple that meets none once, with the build side's missing tuple
(tile_math/outer_columns.py: NULL columns masked, zero tiles); a FULL join marks the build rows met and
hands on the others at the end, in the order the dict join does (keys by first appearance). A NULL probe
key (masked) meets nothing; a build side with NULL join keys is joined as a dict. A residual condition on
keys is evaluated over the pairs met (tile_math/join_residual.py).
"""
from __future__ import annotations

import math
from typing import Iterable, Iterator, Optional

import numpy as np

from trdb.execution.bounded_ranges import bounded_ranges
from trdb.execution.column_batch import ColumnBatch, batch_rows, columns_row_bytes, is_columns
from trdb.execution.tile_math.join_residual import Residual, kept_pairs
from trdb.execution.tile_math.outer_columns import Fill, missing_columns, take_or_missing

LOOKUP_SHARE = 4  # build keys that fill at least a quarter of their box are found by one array lookup


class ColumnTable:
    """The build side of a join as columns: every column's arrays joined, the key rows sorted."""

    def __init__(self, batches: list[ColumnBatch], keys: tuple[int, ...]):
        first = batches[0]
        self.is_tile = first.is_tile
        self.columns = [_concatenated([b.columns[c] for b in batches]) for c in range(len(first.columns))]
        self.matched: Optional[np.ndarray] = None  # the build rows met, where a FULL join asks (`mark_matches`)
        key_columns = [self.columns[k] for k in keys]
        self.single: Optional[tuple[int, ...]] = None  # the key of a build side of one tuple (a tensor of one tile)
        if len(self) == 1:  # its key is compared with each probe tuple's: nothing to number, sort or look up
            self.boxed, self.single = True, tuple(int(c[0]) for c in key_columns)
            self.order, self.sorted, self.lookup = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64), None
            return
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

    @property
    def row_bytes(self) -> int:
        return columns_row_bytes(self.columns)

    def rows(self) -> list[tuple]:
        return ColumnBatch(self.columns, self.is_tile).rows()

    def mark_matches(self) -> None:
        """Keep which build rows probes meet, for `unmatched` (a FULL join)."""
        self.matched = np.zeros(len(self), dtype=bool)

    def probe(self, batch: ColumnBatch, keys: tuple[int, ...], fill: Optional[Fill] = None,
              residual: Optional[Residual] = None) -> Iterator[ColumnBatch]:
        """The joined tuples (probe columns, then build columns) of a probe batch, in parts of about
        `batch_rows` tuples (a probe tuple may meet many build tuples). `fill`: a LEFT or FULL join's
        missing build tuple (MissingColumns.fill), with which each probe tuple that meets none is handed on;
        `residual`: a condition on keys the joined tuples must meet besides the keys (tile_math/join_residual.py)."""
        if self.single is not None:  # one build tuple: met or not by each probe tuple
            pairs = _unique_pairs(np.where(self._meeting_single(batch, keys), 0, -1), fill is not None)
        else:
            step = batch_rows(columns_row_bytes(batch.columns) + self.row_bytes)
            pairs = self._numbered_pairs(batch, keys, fill is not None, step)
        for probe_rows, build_rows in pairs:
            joined = self._joined(batch, probe_rows, build_rows, fill, residual)
            if joined is not None:
                yield joined

    def _numbered_pairs(self, batch: ColumnBatch, keys: tuple[int, ...], outer: bool, step: int) -> Iterable[tuple]:
        """`_pairs` of the probe keys numbered in the build side's box."""
        key_columns = [np.ma.getdata(batch.columns[k]) for k in keys]
        inside = np.ones(len(batch), dtype=bool)
        for k, column, low, high in zip(keys, key_columns, self.low, self.high):
            inside &= (column >= low) & (column <= high)  # no subtraction: it could wrap around
            inside &= ~np.ma.getmaskarray(batch.columns[k])  # a NULL key meets nothing
        numbers = _numbers([np.where(inside, c, low) for c, low in zip(key_columns, self.low)], self.low, self.spans,
                           len(batch))
        if self.lookup is not None:  # unique build keys: one build row or none for each probe tuple
            return _unique_pairs(np.where(inside, self.lookup[numbers], -1), outer)
        return self._pairs(inside, numbers, outer, step)

    def _meeting_single(self, batch: ColumnBatch, keys: tuple[int, ...]) -> np.ndarray:
        """Which probe tuples have the key of a build side of one tuple (a NULL key meets nothing)."""
        met = np.ones(len(batch), dtype=bool)
        for k, value in zip(keys, self.single):
            column = batch.columns[k]
            met &= np.ma.getdata(column) == value
            if type(column) is np.ma.MaskedArray:
                met &= ~np.ma.getmaskarray(column)
        return met

    def _pairs(self, inside: np.ndarray, numbers: np.ndarray, outer: bool,
               step: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Each part's probe rows and the build rows they meet by key (-1: none, where `outer`)."""
        start = np.searchsorted(self.sorted, numbers, side="left")
        counts = np.where(inside, np.searchsorted(self.sorted, numbers, side="right") - start, 0)
        widths = np.maximum(counts, 1) if outer else counts  # a tuple that meets none: once, with the fill
        for low_row, high_row in _parts(widths, step):
            part_widths = widths[low_row:high_row]
            total = int(part_widths.sum())
            if total == 0:
                continue
            probe_rows = low_row + np.repeat(np.arange(high_row - low_row), part_widths)
            offsets = np.arange(total) - np.repeat(np.cumsum(part_widths) - part_widths, part_widths)
            at = np.minimum(np.repeat(start[low_row:high_row], part_widths) + offsets, len(self) - 1)
            yield probe_rows, np.where(np.repeat(counts[low_row:high_row] > 0, part_widths), self.order[at], -1)

    def _joined(self, batch: ColumnBatch, probe_rows: Optional[np.ndarray], build_rows: np.ndarray,
                fill: Optional[Fill], residual: Optional[Residual]) -> Optional[ColumnBatch]:
        """The probe tuples at `probe_rows` (None: all, as they are) beside the build tuples at `build_rows` (-1:
        the missing tuple `fill`), those the residual condition keeps; None where no tuple is left."""
        if self.matched is not None:  # a partner met by key counts as matched, as in the dict join
            self.matched[build_rows[build_rows >= 0]] = True
        if residual is not None:
            probe_rows = np.arange(len(batch)) if probe_rows is None else probe_rows
            probe_rows, build_rows = kept_pairs(batch, self.columns, self.is_tile, probe_rows, build_rows, residual,
                                                fill is not None)
        if not len(build_rows):
            return None
        probe_columns = list(batch.columns) if probe_rows is None else _taken(batch.columns, batch.is_tile, probe_rows)
        if fill is None and self.single is not None:  # the one build tuple beside each: its tiles broadcast
            build_columns = [np.broadcast_to(c, (len(build_rows), *c.shape[1:])) if tile else c[build_rows]
                             for c, tile in zip(self.columns, self.is_tile)]
        elif fill is None:
            build_columns = _taken(self.columns, self.is_tile, build_rows)
        else:
            build_columns = [take_or_missing(c, build_rows, zero) for c, zero in zip(self.columns, fill)]
        return ColumnBatch(probe_columns + build_columns, batch.is_tile + self.is_tile)

    def unmatched(self, probe_fill: Fill) -> Iterator[ColumnBatch]:
        """A FULL join's build tuples that no probe met, beside the probe side's missing tuple `probe_fill`, in
        the dict join's order: keys by their first appearance, each key's tuples in order."""
        rows = np.flatnonzero(~self.matched)
        first = np.empty(len(self), dtype=np.int64)  # each build row's key's first row
        starts = np.flatnonzero(np.r_[True, self.sorted[1:] != self.sorted[:-1]])
        first[self.order] = np.repeat(self.order[starts], np.diff(np.r_[starts, len(self)]))
        rows = rows[np.lexsort((rows, first[rows]))]
        step = batch_rows(self.row_bytes + sum(int(np.size(z)) * z.dtype.itemsize for z in probe_fill if z is not None))
        for start in range(0, len(rows), step):
            part = rows[start:start + step]
            yield ColumnBatch(missing_columns(len(part), probe_fill) + [c[part] for c in self.columns],
                              tuple(zero is not None for zero in probe_fill) + self.is_tile)


# tiles of more elements are joined as the tuples of their batch (views of its stacks): gathering them by index
# would copy each (a block-sparse product's 256 x 1024 tiles: 30% slower), where a tuple's Python is nothing
# beside its kernel
MAX_GATHERED_ELEMENTS = 65_536


def joinable(batch, keys: tuple[int, ...], null_keys: bool = False) -> bool:
    """Whether a batch can take part in a column join on `keys`: a column batch whose keys are int columns,
    NULL (masked) only where `null_keys` (a probe side: a NULL key meets nothing), and whose tiles are small."""
    return is_columns(batch, nulls=True) and not any(batch.is_tile[k] for k in keys) and \
        all(batch.columns[k].dtype.kind in "iu" and (null_keys or type(batch.columns[k]) is not np.ma.MaskedArray)
            for k in keys) and \
        all(not tile or math.prod(column.shape[1:]) <= MAX_GATHERED_ELEMENTS
            for column, tile in zip(batch.columns, batch.is_tile))


def _concatenated(arrays: list[np.ndarray]) -> np.ndarray:
    """One column of the build side's batches (masked where one of them is: NULL non-join columns). A single
    batch's column is taken as it is: a build side of one batch (a tensor's tiles, often one big tile) is not
    copied; the table only reads its columns."""
    if len(arrays) == 1:
        return arrays[0]
    if any(type(a) is np.ma.MaskedArray for a in arrays):
        return np.ma.concatenate(arrays)
    return np.concatenate(arrays)


def _taken(columns: list, is_tile: tuple[bool, ...], rows: np.ndarray) -> list:
    """The columns at `rows`; tile columns as a view (not a copy) where the rows are a run of consecutive ones
    (a join of single big tiles, a build side met in order), which read-only tiles stay."""
    run = len(rows) > 0 and any(is_tile) and int(rows[-1]) - int(rows[0]) == len(rows) - 1 and \
        (len(rows) == 1 or bool((np.diff(rows) == 1).all()))
    if not run:
        return [c[rows] for c in columns]
    low, high = int(rows[0]), int(rows[-1]) + 1
    return [c[low:high] if tile else c[rows] for c, tile in zip(columns, is_tile)]


def _numbers(columns: list[np.ndarray], low: np.ndarray, spans: np.ndarray, rows: int) -> np.ndarray:
    """Each key row's number in the box [low, low + spans) (row-major); all 0 with no key columns."""
    out = np.zeros(rows, dtype=np.int64)
    for column, first, span in zip(columns, low, spans):
        out = out * span + (column.astype(np.int64) - first)
    return out


def _unique_pairs(build_rows: np.ndarray, outer: bool) -> list[tuple[Optional[np.ndarray], np.ndarray]]:
    """The probe rows and the build rows they meet where each meets one or none (`build_rows`, -1: none): every
    probe row (None) where all meet one or the join is outer, else those that meet one."""
    probe_rows = None if outer or (build_rows >= 0).all() else np.flatnonzero(build_rows >= 0)
    return [(probe_rows, build_rows if probe_rows is None else build_rows[probe_rows])]


def _parts(counts: np.ndarray, step: int) -> Iterator[tuple[int, int]]:
    """Consecutive probe rows whose matches add up to about `step` joined tuples (at least one row each)."""
    if int(counts.sum()) <= step:
        return iter([(0, len(counts))])
    return bounded_ranges(counts, step)


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
