"""An aggregate's groups as arrays: SUM, AVG and COUNT by key columns over column batches, with no Python step
per group until the result is handed on as column batches.

A hash aggregate keeps a Python dict entry and an accumulator object per group: over a gradient's
100,000 groups of one or two tuples each (one embedding a key) that is most of its time. Where every
batch is a column batch, the groups are key columns and every call is a SUM, AVG or COUNT(*) that
tile_math/stacked_sums.py evaluates stacked, each batch is reduced to its groups at once (the keys
sorted, each group's values added by `np.add.reduceat`) and kept as arrays; the parts are merged the same
way when they grow, and at the end. The sums are those of the tuple-by-tuple addition up to rounding.
"""
from __future__ import annotations

from typing import Iterator, Optional

import numpy as np

from trdb.execution.column_batch import COLUMN_BATCH_ROWS, ColumnBatch
from trdb.execution.work import charge

Part = tuple[np.ndarray, np.ndarray, list]  # keys (n x m), counts (n,), each call's sums (n, *tile) or None
COMPACT_ROWS = 1 << 16  # parts are merged once they hold this many groups more than the last merge left
SHORT_SEGMENT = 32  # segments up to this long are added k-th rows at once ...
SEGMENT_PASSES = 8  # ... while (longest x segments) is at most this many times the rows


class ColumnGroups:
    """The groups of one aggregate, as parts of arrays."""

    def __init__(self, functions: list[str]):
        self.functions = functions
        self.parts: list[Part] = []
        self.rows = 0
        self._merged_rows = 0

    def accepts(self, values: list) -> bool:
        """Whether a batch's values stack with those held: one tile shape and dtype per call (the groups of
        edge tiles, smaller, go on as a dict, where each group holds its own shape)."""
        if not self.parts:
            return True
        return all((a is None) == (b is None) and (a is None or (a.shape[1:] == b.shape[1:] and a.dtype == b.dtype))
                   for a, b in zip(values, self.parts[0][2]))

    def add(self, keys: np.ndarray, values: list) -> int:
        """Add a batch's tuples (their group keys, each call's values); returns the bytes the groups grew by."""
        part = _reduced(keys, np.ones(len(keys), dtype=np.int64), values)
        self.parts.append(part)
        self.rows += len(part[0])
        grown = _bytes(part)
        if self.rows - self._merged_rows > COMPACT_ROWS:
            before = sum(_bytes(p) for p in self.parts)
            self._merge()
            grown -= before - _bytes(self.parts[0])
        return grown

    def _merge(self) -> None:
        keys = np.concatenate([p[0] for p in self.parts])
        counts = np.concatenate([p[1] for p in self.parts])
        values = [None if self.parts[0][2][c] is None else np.concatenate([p[2][c] for p in self.parts])
                  for c in range(len(self.functions))]
        self.parts = [_reduced(keys, counts, values)]
        self.rows = self._merged_rows = len(self.parts[0][0])

    def groups(self) -> Part:
        """Every group: keys, counts, sums (merged)."""
        if len(self.parts) != 1:
            self._merge()
        return self.parts[0]

    def batches(self, width: int) -> Iterator[ColumnBatch]:
        """The result as column batches: the group keys, then each call's result (COUNT an int column,
        SUM a stack, AVG a stack of the sums over the counts, in the sums' dtype)."""
        keys, counts, sums = self.groups()
        columns = [keys[:, k] for k in range(width)]
        is_tile = [False] * width
        for function, total in zip(self.functions, sums):
            if function == "COUNT":
                columns.append(counts)
                is_tile.append(False)
                continue
            if function == "AVG":
                total = total / counts.astype(total.dtype).reshape(-1, *(1,) * (total.ndim - 1))
            columns.append(total)
            is_tile.append(True)
        for start in range(0, len(counts), COLUMN_BATCH_ROWS):
            yield ColumnBatch([c[start:start + COLUMN_BATCH_ROWS] for c in columns], is_tile)

    def parts_as_groups(self) -> Iterator[tuple[tuple, int, list]]:
        """Each group as (key tuple, count, each call's sum): for an aggregate that goes on tuple by tuple."""
        if not self.parts:
            return
        keys, counts, sums = self.groups()
        for position, key in enumerate(map(tuple, keys.tolist())):
            yield key, int(counts[position]), [None if s is None else s[position].copy() for s in sums]


def _reduced(keys: np.ndarray, counts: np.ndarray, values: list) -> Part:
    """The rows of `keys` merged by key: counts and values added up within each key (keys in order)."""
    if keys.shape[1] == 0:
        starts, order = np.zeros(1 if len(keys) else 0, dtype=np.int64), None
    else:
        order = np.lexsort(keys.T[::-1])
        ordered = keys[order]
        change = np.ones(len(keys), dtype=bool)
        change[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
        starts = np.flatnonzero(change)
    if len(starts) == len(keys) and order is not None:  # every key once: only the order changes
        return keys[order], counts[order], [None if v is None else v[order] for v in values]
    take = (lambda a: a) if order is None else (lambda a: a[order])
    sums = []
    for value in values:
        if value is None:
            sums.append(None)
            continue
        charge(value.size, 3 * value.nbytes)  # as the additions one by one
        sums.append(_segment_sums(value, order, starts))
    return take(keys)[starts], np.add.reduceat(take(counts), starts), sums


def _segment_sums(value: np.ndarray, order: Optional[np.ndarray], starts: np.ndarray) -> np.ndarray:
    """The rows of `value` taken in `order` (None: as they are), added up in order within each segment that
    begins at `starts`. Where segments are short (a gradient's groups of one or a few embeddings) the k-th
    rows of all segments longer than k are added at once: `np.add.reduceat` takes about 300 ns a segment
    (a stack of 65,536 tiles of 64 in 48,049 groups: 48 ms, against 6.6 ms so)."""
    lengths = np.diff(starts, append=len(value))
    longest = int(lengths.max()) if len(lengths) else 0
    if longest > SHORT_SEGMENT or longest * len(starts) > SEGMENT_PASSES * len(value):  # reduceat's loop is faster
        ordered = value if order is None else value[order]
        return np.add.reduceat(ordered, starts, axis=0, dtype=value.dtype)
    place = (lambda at: at) if order is None else (lambda at: order[at])
    sums = value[place(starts)]
    for k in range(1, longest):
        longer = np.flatnonzero(lengths > k)
        sums[longer] += value[place(starts[longer] + k)]
    return sums


def _bytes(part: Part) -> int:
    keys, counts, sums = part
    return int(keys.nbytes + counts.nbytes + sum(s.nbytes for s in sums if s is not None))


def group_keys(batch: ColumnBatch, positions: list[int]) -> Optional[np.ndarray]:
    """The group key columns of a column batch as an n x m int64 array, where they are int key columns."""
    if any(batch.is_tile[p] or batch.columns[p].dtype.kind not in "iu" for p in positions):
        return None
    if not positions:
        return np.zeros((len(batch), 0), dtype=np.int64)
    return np.stack([batch.columns[p].astype(np.int64, copy=False) for p in positions], axis=1)
