"""GroupBox: an aggregate's groups as arrays over every key of a box, each group at its key's place in the box.

Where the group keys of an aggregate over column batches fill much of the box between their least and
greatest values (a gradient's keys: nearly every embedding of a table), the groups are kept as arrays
of one row per key of the box: a batch is added at its keys' places (or its elementwise minimum or maximum
taken with what is there), with no sort of what was added before; as it comes where few of its keys repeat
(`add_rows`), else reduced to its groups first. A count
of zero marks a key with no group (a group whose sums are zero is one: zeros are values).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

Part = tuple[np.ndarray, np.ndarray, list]  # keys (n x m), counts (n,), each call's sums (n, *tile) or None
REPEATED_SHARE = 0.125  # add_rows takes batches where at most this share of the rows repeat a key


class GroupBox:
    """Counts and sums for every key from `low` to `high` (each key column's least and greatest, inclusive)."""

    def __init__(self, low: np.ndarray, high: np.ndarray, like: list, combine: list):
        self.low, self.high, self.combine = low, high, combine
        self.extent = tuple(int(n) for n in high - low + 1)
        size = int(np.prod(self.extent))
        self.counts = np.zeros(size, dtype=np.int64)
        self.sums = [None if v is None else _identity((size, *v.shape[1:]), v.dtype, f) for v, f in zip(like, combine)]
        self._last: Optional[np.ndarray] = None  # add_rows' scratch: the last row of a batch at each place

    @property
    def nbytes(self) -> int:
        scratch = self._last.nbytes if self._last is not None else 0
        return int(self.counts.nbytes + scratch + sum(s.nbytes for s in self.sums if s is not None))

    def holds(self, low: np.ndarray, high: np.ndarray) -> bool:
        """Whether keys from `low` to `high` (each key column's least and greatest) lie inside the box."""
        return bool((low >= self.low).all() and (high <= self.high).all())

    def add(self, part: Part) -> None:
        """Add groups of unique keys, all inside the box."""
        keys, counts, sums = part
        self._combine_at(self._places(keys), counts, sums)

    def add_rows(self, keys: np.ndarray, values: list) -> bool:
        """Add a batch's tuples as they come (keys n x m, all inside the box; each call's values), each one a group
        of one, where most keys of the batch occur once in it (a gradient's keys over a table of embeddings): those
        go to their places at once, the few that repeat one after another (`ufunc.at`, about 1 us a row). No sort,
        where reducing the batch to its groups first sorted it (1,000,000 embeddings' gradients into 100,000 groups:
        0.20 against 0.27 s). False, with nothing added, where more than a REPEATED_SHARE of the rows repeat a key
        (few groups: the batch is better reduced first), or where so many would be expected of keys spread over
        the box (about n / 2 of every box's size keys repeat, of n drawn at random)."""
        if 2 * REPEATED_SHARE * len(self.counts) < len(keys):
            return False
        places = self._places(keys)
        rows = np.arange(len(places))
        if self._last is None:
            self._last = np.empty(len(self.counts), dtype=np.int64)
        self._last[places] = rows  # of several rows with one place, the last is written last
        once = self._last[places] == rows
        repeated = len(rows) - int(np.count_nonzero(once))
        if repeated > REPEATED_SHARE * len(rows):
            return False
        if not repeated:
            self._combine_at(places, 1, values)
            return True
        self._combine_at(places[once], 1, [None if v is None else v[once] for v in values])
        rest = ~once  # the other rows of a repeated place, in order
        np.add.at(self.counts, places[rest], 1)
        for held, value, ufunc in zip(self.sums, values, self.combine):
            if held is not None:
                ufunc.at(held, places[rest], value[rest])
        return True

    def _places(self, keys: np.ndarray) -> np.ndarray:
        """Each key's place in the box (keys n x m, inside it)."""
        return np.ravel_multi_index(tuple((keys - self.low).T), self.extent)

    def _combine_at(self, places: np.ndarray, counts, sums: list) -> None:
        """Groups at distinct `places`: their counts added there, and each call's sums combined by its ufunc."""
        self.counts[places] += counts
        for held, values, ufunc in zip(self.sums, sums, self.combine):
            if held is None:
                continue
            if ufunc is np.add:
                held[places] += values
            else:  # a key's first values meet the identity (+-inf or the dtype's bounds) there
                held[places] = ufunc(held[places], values)

    def as_part(self) -> Part:
        """The groups (keys with a count), in key order."""
        present = np.flatnonzero(self.counts)
        keys = np.stack(np.unravel_index(present, self.extent), axis=1).astype(np.int64) + self.low \
            if len(self.extent) else np.zeros((len(present), 0), np.int64)
        return keys, self.counts[present], [None if s is None else s[present] for s in self.sums]


def _identity(shape: tuple, dtype: np.dtype, ufunc) -> np.ndarray:
    """An array of `ufunc`'s identity: 0 for a sum, the greatest value for a minimum, the least for a maximum."""
    if ufunc is np.add:
        return np.zeros(shape, dtype=dtype)
    low, high = (-np.inf, np.inf) if np.dtype(dtype).kind == "f" else (np.iinfo(dtype).min, np.iinfo(dtype).max)
    return np.full(shape, high if ufunc is np.minimum else low, dtype=dtype)


def box_size(low: np.ndarray, high: np.ndarray) -> Optional[int]:
    """How many keys lie from `low` to `high`; None past int64 (no box of them can be made)."""
    size = 1
    for extent in (high.astype(object) - low.astype(object) + 1).tolist():
        size *= int(extent)
        if size >= 1 << 62:
            return None
    return size
