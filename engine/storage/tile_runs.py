"""TileRuns: a read's tiles as a list, knowing the runs of them that are views of one stacked array `(n, *tile)`."""
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
