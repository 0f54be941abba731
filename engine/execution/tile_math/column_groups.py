"""An aggregate's groups as arrays: SUM, AVG, MIN, MAX and COUNT by key columns over column batches, with no Python
step per group until the result is handed on as column batches.

A hash aggregate keeps a Python dict entry and an accumulator object per group: over a gradient's
100,000 groups of one or two tuples each (one embedding a key) that is most of its time. Where every
batch is a column batch, the groups are key columns and every call is a SUM, AVG or COUNT(*) that
tile_math/stacked_sums.py evaluates stacked, each batch is reduced to its groups at once (the keys
sorted, each group's values added in order) and kept as arrays; the parts are merged the same way when
they grow (each merge at least doubling what the last left), and at the end. Where the keys fill much of
the box between their bounds, the groups move into arrays over that box (tile_math/group_box.py) and each
batch is added at its keys' places. The sums are those of the tuple-by-tuple addition up to rounding;
minima and maxima are the same.
"""
from __future__ import annotations

from typing import Iterator, Optional

import numpy as np

from trdb.execution.column_batch import ColumnBatch, batch_rows, columns_row_bytes
from trdb.execution.tile_math.group_box import GroupBox, box_size
from trdb.execution.tile_math.stacked_sums import COMBINE
from trdb.execution.work import charge
from trdb.kernels.axis_reductions import any_in_rows, column_bounds

Part = tuple[np.ndarray, np.ndarray, list]  # keys (n x m), counts (n,), each call's result (n, *tile) or None
COMPACT_ROWS = 1 << 16  # parts are merged once they hold this many groups more than the last merge left
DENSE_SHARE = 4  # the groups go into a box over their keys once it holds at most this many keys a tuple added
SHORT_SEGMENT = 32  # segments up to this long are added k-th rows at once ...
SEGMENT_PASSES = 8  # ... while (longest x segments) is at most this many times the rows


class ColumnGroups:
    """The groups of one aggregate, as parts of arrays, or in a box over their keys (tile_math/group_box.py)
    once that box holds at most DENSE_SHARE keys for each tuple added."""

    def __init__(self, functions: list[str], scalars: Optional[list[bool]] = None):
        self.functions = functions
        self.scalars = scalars or [False] * len(functions)  # calls whose results are numbers (MIN of a key), not tiles
        self.combine = [COMBINE.get(f) for f in functions]  # each call's ufunc (None: COUNT)
        self.parts: list[Part] = []
        self.rows = 0  # groups held in parts
        self._parts_bytes = 0
        self.tuples = 0  # tuples added
        self.box: Optional[GroupBox] = None
        self._merged_rows = 0
        self._like: Optional[list] = None  # the first batch's values, empty: the shape and dtype of each call's
        self._low: Optional[np.ndarray] = None  # the least and greatest value of each key column added
        self._high: Optional[np.ndarray] = None

    def accepts(self, values: list) -> bool:
        """Whether a batch's values stack with those held: one tile shape and dtype per call (the groups of
        edge tiles, smaller, go on as a dict, where each group holds its own shape)."""
        if self._like is None:
            return True
        return all((a is None) == (b is None) and (a is None or (a.shape[1:] == b.shape[1:] and a.dtype == b.dtype))
                   for a, b in zip(values, self._like))

    def add(self, keys: np.ndarray, values: list, counts: Optional[np.ndarray] = None) -> int:
        """Add a batch's tuples (their group keys, each call's values), or, with `counts`, groups that many tuples
        each made (each call's total over them); returns the bytes the groups grew by."""
        if self._like is None:
            self._like = [None if v is None else v[:0] for v in values]
        self.tuples += len(keys) if counts is None else int(counts.sum())
        self._bound(keys)
        before = self.nbytes
        counts = np.ones(len(keys), dtype=np.int64) if counts is None else counts
        if self.box is not None and self.box.holds(self._low, self._high):  # the bounds of every key added
            if len(keys) == len(counts) and not (counts != 1).any() and self.box.add_rows(keys, values):
                return self.nbytes - before  # add_rows' scratch, the first time
            self.box.add(_reduced(keys, counts, values, self.combine))
            return self.nbytes - before
        part = _reduced(keys, counts, values, self.combine)
        if self.box is not None:  # a key outside the box: its groups go back into parts (a larger box may follow)
            self._set_parts([self.box.as_part()])
            self.box, self._merged_rows = None, self.rows
        self.parts.append(part)
        self.rows += len(part[0])
        self._parts_bytes += _bytes(part)
        if (high := self._box_high()) is not None:
            self.box = GroupBox(self._low, high, self._like, self.combine)
            for held in self.parts:
                self.box.add(held)
            self._set_parts([])
            self._merged_rows = 0
        elif self.rows - self._merged_rows > max(COMPACT_ROWS, self._merged_rows):  # merges cost O(n log n) in all
            self._merge()
        return self.nbytes - before

    def _bound(self, keys: np.ndarray) -> None:
        if not len(keys) or not keys.shape[1]:
            return
        low, high = column_bounds(keys)
        self._low = low if self._low is None else np.minimum(self._low, low)
        self._high = high if self._high is None else np.maximum(self._high, high)

    def _box_high(self) -> Optional[np.ndarray]:
        """The upper corner of a box for the keys added, if one fits DENSE_SHARE (the first key column's range
        doubled where that fits too, so that keys that grow as they come make a new box only now and then)."""
        if self._low is None or not _within_int64(self._low, self._high):
            return None
        size = box_size(self._low, self._high)
        if size is None or size > DENSE_SHARE * self.tuples:
            return None
        padded = self._high.copy()
        room = int(self._high[0]) - int(self._low[0]) + 1
        if size * 2 <= DENSE_SHARE * self.tuples and int(self._high[0]) + room < 1 << 62:
            padded[0] += room
        return padded

    @property
    def nbytes(self) -> int:
        return self._parts_bytes + (self.box.nbytes if self.box is not None else 0)

    def _set_parts(self, parts: list[Part]) -> None:
        self.parts = parts
        self._parts_bytes = sum(_bytes(p) for p in parts)
        self.rows = sum(len(p[0]) for p in parts)

    def _merge(self) -> None:
        keys = np.concatenate([p[0] for p in self.parts])
        counts = np.concatenate([p[1] for p in self.parts])
        values = [None if self.parts[0][2][c] is None else np.concatenate([p[2][c] for p in self.parts])
                  for c in range(len(self.functions))]
        self._set_parts([_reduced(keys, counts, values, self.combine)])
        self._merged_rows = self.rows

    def groups(self) -> Part:
        """Every group: keys, counts, sums (merged), in key order."""
        if self.box is not None:
            self._set_parts([self.box.as_part()])
            self.box, self._merged_rows = None, self.rows
        if len(self.parts) != 1:
            self._merge()
        return self.parts[0]

    def batches(self, width: int) -> Iterator[ColumnBatch]:
        """The result as column batches: the group keys, then each call's result (COUNT an int column,
        SUM, MIN and MAX a stack, AVG a stack of the sums over the counts, in the sums' dtype)."""
        keys, counts, sums = self.groups()
        columns = [keys[:, k] for k in range(width)]
        is_tile = [False] * width
        for function, total, scalar in zip(self.functions, sums, self.scalars):
            if function == "COUNT":
                columns.append(counts)
                is_tile.append(False)
                continue
            if function == "AVG":
                total = total / counts.astype(total.dtype).reshape(-1, *(1,) * (total.ndim - 1))
            columns.append(total)
            is_tile.append(not scalar)
        step = batch_rows(columns_row_bytes(columns))
        for start in range(0, len(counts), step):
            yield ColumnBatch([c[start:start + step] for c in columns], is_tile)

    def parts_as_groups(self) -> Iterator[tuple[tuple, int, list]]:
        """Each group as (key tuple, count, each call's sum): for an aggregate that goes on tuple by tuple."""
        if not self.tuples:
            return
        keys, counts, sums = self.groups()
        for position, key in enumerate(map(tuple, keys.tolist())):
            yield key, int(counts[position]), [None if s is None else s[position].copy() for s in sums]


def one_group(keys: np.ndarray) -> bool:
    """Whether key rows (n x m, n > 0) are all one group's: every row the first."""
    return not (keys != keys[0]).any()


def _reduced(keys: np.ndarray, counts: np.ndarray, values: list, combine: list) -> Part:
    """The rows of `keys` merged by key: counts added, and each call's values combined by its ufunc (`combine`:
    added, or their elementwise minimum or maximum taken) within each key (keys in order)."""
    if keys.shape[1] == 0 or (len(keys) and one_group(keys)):  # one group: no sort, no gather
        starts, order = np.zeros(1 if len(keys) else 0, dtype=np.int64), None
    else:
        order = np.lexsort(keys.T[::-1])
        ordered = keys[order]
        change = np.ones(len(keys), dtype=bool)
        change[1:] = any_in_rows(ordered[1:] != ordered[:-1])
        starts = np.flatnonzero(change)
    if len(starts) == len(keys) and order is not None:  # every key once: only the order changes
        return keys[order], counts[order], [None if v is None else v[order] for v in values]
    take = (lambda a: a) if order is None else (lambda a: a[order])
    sums = []
    for value, ufunc in zip(values, combine):
        if value is None:
            sums.append(None)
            continue
        charge(value.size, 3 * value.nbytes)  # as the additions one by one
        sums.append(_segment_sums(value, order, starts, ufunc))
    return take(keys)[starts], np.add.reduceat(take(counts), starts), sums


def _segment_sums(value: np.ndarray, order: Optional[np.ndarray], starts: np.ndarray, ufunc=np.add) -> np.ndarray:
    """The rows of `value` taken in `order` (None: as they are), combined by `ufunc` (added, or the elementwise
    minimum or maximum) in order within each segment that begins at `starts`. Where segments are short (a
    gradient's groups of one or a few embeddings) the k-th rows of all segments longer than k are combined at
    once: `np.add.reduceat` takes about 300 ns a segment (a stack of 65,536 tiles of 64 in 48,049 groups:
    48 ms, against 6.6 ms so)."""
    lengths = np.diff(starts, append=len(value))
    longest = int(lengths.max()) if len(lengths) else 0
    if longest > SHORT_SEGMENT or longest * len(starts) > SEGMENT_PASSES * len(value):  # reduceat's loop is faster
        ordered = value if order is None else value[order]
        return ufunc.reduceat(ordered, starts, axis=0, dtype=value.dtype)
    place = (lambda at: at) if order is None else (lambda at: order[at])
    sums = value[place(starts)]
    for k in range(1, longest):
        longer = np.flatnonzero(lengths > k)
        sums[longer] = ufunc(sums[longer], value[place(starts[longer] + k)])
    return sums


def _within_int64(low: np.ndarray, high: np.ndarray) -> bool:
    """Whether every key offset from `low` (and the box's places) can be computed in int64 without wrapping."""
    return all(int(h) - int(l) < 1 << 62 for l, h in zip(low.tolist(), high.tolist()))


def _bytes(part: Part) -> int:
    keys, counts, sums = part
    return int(keys.nbytes + counts.nbytes + sum(s.nbytes for s in sums if s is not None))


def group_keys(batch: ColumnBatch, functions: list) -> Optional[np.ndarray]:
    """The group keys of a column batch as an n x m int64 array, each column one key function's values
    (tile_math/key_columns.py), or None where one cannot be evaluated on the arrays or is NULL somewhere."""
    if not functions:
        return np.zeros((len(batch), 0), dtype=np.int64)
    columns = [f(batch) for f in functions]
    if any(c is None or isinstance(c, np.ma.MaskedArray) for c in columns):
        return None
    return np.stack(columns, axis=1)
