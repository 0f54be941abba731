"""The keys a write has stored so far, by their places in the tile grid: a mark per place where the grid is small
enough, checked and set by whole arrays (a million keys: no Python step each), else a set."""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np

MAX_MARKS = 1 << 26  # places of a grid marked in a bool array (64 MiB at most); a larger grid's keys go in a set


class WrittenKeys:
    """Grid places (key_positions' ints, or key tuples for a grid beyond int64) as a set would hold them:
    `in`, `add`, `update`, `isdisjoint`; with `marks`, whole arrays of places at once (`any_of`, `mark`)."""

    def __init__(self, grid: tuple[int, ...]):
        size = math.prod(grid)
        # a 0-d tensor's one key is the tuple (); an empty grid has no places
        self._size = size if grid and 0 < size <= MAX_MARKS else None
        self._marks: np.ndarray | None = None  # made at the first array of places
        self._set: set = set()
        self._marked = False  # whether any place is marked

    @property
    def marks(self) -> bool:
        """Whether places may be given as int arrays (the grid is small enough to mark)."""
        return self._size is not None

    def any_of(self, places: np.ndarray) -> bool:
        """Whether any of these places (an int64 array, each within the grid) was written already."""
        if self._marks is None:
            return bool(self._set) and not self._set.isdisjoint(places.tolist())
        return bool(self._marks[places].any())

    def mark(self, places: np.ndarray) -> None:
        if self._marks is None:
            self._marks = np.zeros(self._size, dtype=bool)
            if self._set:
                self._marks[np.fromiter(self._set, dtype=np.int64, count=len(self._set))] = True
                self._set = set()
        self._marks[places] = True
        self._marked = self._marked or len(places) > 0

    def __contains__(self, place) -> bool:
        if self._marks is not None:
            return isinstance(place, int) and 0 <= place < self._size and bool(self._marks[place])
        return place in self._set

    def add(self, place) -> None:
        if self._marks is not None:
            self._marks[place] = True
            self._marked = True
        else:
            self._set.add(place)

    def update(self, places: Iterable) -> None:
        if self._marks is not None:
            self.mark(np.fromiter(places, dtype=np.int64))
        else:
            self._set.update(places)

    def isdisjoint(self, places: Iterable) -> bool:
        if self._marks is None:
            return self._set.isdisjoint(places)
        return not any(place in self for place in places)

    def __bool__(self) -> bool:
        return bool(self._set) or self._marked
