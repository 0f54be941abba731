"""A result's column batches of full tiles placed into one dense array by their key arrays, with no step per tile."""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import numpy as np

from trdb.execution.column_batch import ColumnBatch
from trdb.kernels.axis_reductions import column_bounds
from trdb.kernels.distinct import all_distinct
from trdb.kernels.tile_blocks import blocks


class ColumnBatches(tuple):
    """A result's remaining rows as the column batches they came in (fetch_tensor places their stacks at once)."""

    def rows(self) -> list[tuple]:
        return [row for batch in self for row in batch.rows()]


def placed_columns(batches: ColumnBatches, key_positions: tuple[int, ...], value_position: int,
                   tile: tuple[int, ...], shape: Optional[Sequence[int]], least: Sequence[int],
                   make: Callable[[tuple, bool], np.ndarray]) -> Optional[np.ndarray]:
    """The tiles of `batches` (every one a full `tile`, one key per tile axis, keys unique, inside `shape`, or
    without one the smallest shape of at least `least` that holds them; a multiple of the tile) placed in the
    array `make(shape, exact)` gives (`exact`: the tiles cover it); None where any of that does not hold (the
    tuple-by-tuple assembly decides)."""
    if len(key_positions) != len(tile) or not key_positions or not batches:
        return None
    for batch in batches:
        stack = batch.columns[value_position]
        if not batch.is_tile[value_position] or stack.shape[1:] != tuple(tile) or \
                any(batch.is_tile[p] for p in key_positions):
            return None
    keys = np.stack([np.concatenate([b.columns[p] for b in batches]) for p in key_positions], axis=1)
    if not len(keys):
        return None
    low, high = column_bounds(keys)
    if low.min() < 0:
        return None
    tops = high.tolist()
    if shape is None:
        shape = tuple(max((top + 1) * t, int(n)) for top, t, n in zip(tops, tile, least))
    shape = tuple(int(n) for n in shape)
    if len(shape) != len(tile) or any(n % t for n, t in zip(shape, tile)):
        return None
    grid = tuple(n // t for n, t in zip(shape, tile))
    if any(top >= g for top, g in zip(tops, grid)):
        return None
    places = np.ravel_multi_index(tuple(keys.T), grid)
    if not all_distinct(places):
        return None  # two tiles under one key: the tuple-by-tuple assembly says so
    out = make(shape, len(places) == math.prod(grid))
    view = blocks(out, tile)  # (grid..., tile...)
    for batch in batches:
        view[tuple(batch.columns[p] for p in key_positions)] = batch.columns[value_position]
    return out


def all_column_batches(batches: Sequence) -> bool:
    return bool(batches) and all(type(b) is ColumnBatch for b in batches)
