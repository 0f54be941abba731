"""TileRuns and StackedTiles: a read's tiles as a list knowing its runs stacked in one array `(n, *tile)`, or the stacks."""
from __future__ import annotations

from typing import Iterable, Optional

import numpy as np

MIN_RUN = 16  # fewer consecutive tiles of one shape are no run: a column batch of them would save nothing


def tile_views(stack: np.ndarray) -> list:
    """The tiles of a stack `(n, *tile)` as views, one per row; a stack of 0-d tiles gives 0-d arrays (as a
    read gives them), not numpy scalars."""
    return list(stack) if stack.ndim > 1 else [stack[i, ...] for i in range(len(stack))]


class TileRuns(list):
    """The tiles of a read, in order (a list, as any read's), with `runs`: (start, stack) pairs where tiles
    start .. start + len(stack) - 1 are the rows of `stack`, one dense array. An operator that works on
    stacks (columnar batches) takes them from here without a step per tile; any other reads the list."""

    def __init__(self, tiles: Iterable = (), runs: tuple[tuple[int, np.ndarray], ...] = ()):
        super().__init__(tiles)
        self.runs = runs

    def pieces(self) -> Iterable[tuple[int, int, Optional[np.ndarray]]]:
        """(start, stop, stack) covering every tile in order: a run with its stack, the tiles between runs
        with None."""
        at = 0
        for start, stack in self.runs:
            if start > at:
                yield at, start, None
            yield start, start + len(stack), stack
            at = start + len(stack)
        if at < len(self):
            yield at, len(self), None


def as_tile_runs(tiles: list) -> TileRuns:
    """`tiles` (host tiles) with their runs of at least MIN_RUN consecutive dense tiles of one shape and dtype
    (or all of them, however few) copied into one read-only stack each (the list then holds views of the
    stacks); the others as they are."""
    out: list = list(tiles)
    runs: list[tuple[int, np.ndarray]] = []
    start = 0
    for end in range(1, len(out) + 1):
        if end < len(out) and _same_kind(out[start], out[end]):
            continue
        if (end - start >= MIN_RUN or end - start == len(out)) and type(out[start]) is np.ndarray:
            stack = np.stack(out[start:end])
            stack.flags.writeable = False
            out[start:end] = tile_views(stack)
            runs.append((start, stack))
        start = end
    return TileRuns(out, tuple(runs))


def _same_kind(a, b) -> bool:
    return type(a) is np.ndarray and type(b) is np.ndarray and a.shape == b.shape and a.dtype == b.dtype


class StackedTiles:
    """A tensor's tiles kept as stacks only (what a write of them as stacks leaves in the buffer pool): `runs`,
    (start, stack) pairs covering every tile in key order under `keys`. `tiles()` gives them as a read does (a
    TileRuns, each tile a view of its row), made once, when first asked for; a scan takes the stacks as they
    are: a view of each of 1,000,000 tiles took 110 ms of an UPDATE that kept them."""

    __slots__ = ("keys", "runs", "_tiles")

    def __init__(self, keys: np.ndarray, runs: tuple[tuple[int, np.ndarray], ...]):
        self.keys, self.runs = keys, tuple(run for run in runs if len(run[1]))
        self._tiles: Optional[TileRuns] = None

    def tiles(self) -> tuple[np.ndarray, TileRuns]:
        if self._tiles is None:  # two threads may both make it: either list is the same
            views: list = []
            for _, stack in self.runs:
                views.extend(tile_views(stack))
            self._tiles = TileRuns(views, self.runs)
        return self.keys, self._tiles

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes) + sum(int(stack.nbytes) for _, stack in self.runs)

    def __len__(self) -> int:
        return len(self.keys)
