"""RETILE of dense tiles that fill their grid, as whole-array moves: the old tiles placed into one array through a
view of it as blocks (one fancy-index assignment for all full tiles), the new tiles cut from it through another
such view (one copy), handed on as column batches of stacks where they are small: no Python step per tile.

Tile by tile, each new tile gathers the overlaps of the old tiles it meets: 1,000,000 tiles of one value re-cut to
tiles of 1,000 took about 7 us a tile, and back about 33 us a tile. Anything else (an absent or CSR tile, a tile
not of its place's shape, a box too large for the memory budget) returns None: RetileExec goes tile by tile.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np

from trdb.execution.column_batch import SMALL_TILE_BYTES, ColumnBatch, batch_rows, columns_row_bytes
from trdb.kernels.tile_blocks import blocks, fills_grid

Mine = Callable[[np.ndarray], np.ndarray]  # new keys (m x d) -> which of them this instance cuts


def retiled(parts: list[tuple[np.ndarray, np.ndarray]], old: tuple[int, ...], new: tuple[int, ...],
            extent: tuple[int, ...], dtype: np.dtype, room: Callable[[int], bool],
            mine: Optional[Mine] = None) -> Optional[tuple[list[ColumnBatch], list[tuple]]]:
    """The new tiles (`new` a tile) of the old ones over `extent`, in `dtype`: column batches and tuples (`cut_tiles`).
    `parts`: (keys n x d in the old grid, their tiles stacked `(n, *shape)`) pairs; `old` the nominal old tile.
    None where the tiles do not fill their grid once each, are not of their places' shapes, or `room(bytes)`
    refuses the two arrays it takes."""
    if not parts or not extent:
        return None
    keys = np.concatenate([k for k, _ in parts])
    grid = tuple(-(-e // o) for e, o in zip(extent, old))
    if not fills_grid(keys, grid):
        return None  # an absent tile: only pieces of present tiles are present
    padded = tuple(max(-(-e // o) * o, -(-e // n) * n) for e, o, n in zip(extent, old, new))
    if not room(2 * math.prod(padded) * np.dtype(dtype).itemsize):
        return None
    box = np.zeros(padded, dtype=dtype)
    if not all(_placed(box, part_keys, stack, old, extent) for part_keys, stack in parts):
        return None
    return cut_tiles(box, new, extent, mine)


def stacked_parts(tiles: dict) -> Optional[list[tuple[np.ndarray, np.ndarray]]]:
    """Tiles under their keys (a dict) as `retiled`'s parts, one a tile shape; None where one is not a host array."""
    groups: dict[tuple, list] = {}
    for key, tile in tiles.items():
        if type(tile) is not np.ndarray:
            return None
        groups.setdefault(tile.shape, []).append((key, tile))
    return [(np.array([key for key, _ in group], dtype=np.int64).reshape(len(group), -1),
             np.stack([tile for _, tile in group])) for group in groups.values()]


def _placed(box: np.ndarray, keys: np.ndarray, stack: np.ndarray, old: tuple, extent: tuple) -> bool:
    """Write tiles of one shape at their places in `box`: full tiles at once, edge tiles one by one; False where a
    tile's shape is not its place's."""
    places = keys * np.array(old)
    shapes = np.minimum(np.array(old), np.array(extent) - places)
    if not (shapes == np.array(stack.shape[1:])).all():
        return False
    if stack.shape[1:] == tuple(old):
        grid_box = box[tuple(slice(0, -(-e // o) * o) for e, o in zip(extent, old))]
        blocks(grid_box, old)[tuple(keys.T)] = stack
        return True
    for place, tile in zip(places.tolist(), stack):  # edge tiles: a row or a column of the grid
        box[tuple(slice(p, p + s) for p, s in zip(place, tile.shape))] = tile
    return True


def cut_tiles(box: np.ndarray, new: tuple[int, ...], extent: tuple[int, ...],
              mine: Optional[Mine] = None) -> tuple[list[ColumnBatch], list[tuple]]:
    """The new tiles in key order, cut from `box` (padded to whole new tiles) as one stack: column batches where
    they are small tiles of one shape, else tuples of views (edge tiles cut to the extent)."""
    grid = tuple(-(-e // n) for e, n in zip(extent, new))
    keys = _all_keys(grid)
    stack = np.ascontiguousarray(blocks(box[tuple(slice(0, g * n) for g, n in zip(grid, new))], new))
    stack = stack.reshape(-1, *new)  # a copy of the box, in key order
    if mine is not None:
        kept = mine(keys)
        keys, stack = keys[kept], stack[kept]
    edge = (keys >= np.array([e // n for e, n in zip(extent, new)])).any(axis=1)
    if not edge.any() and len(stack) and stack[0].nbytes <= SMALL_TILE_BYTES:
        columns = np.ascontiguousarray(keys.T)
        step = batch_rows(columns_row_bytes([keys, stack]))
        return [ColumnBatch([*columns[:, start:start + step], stack[start:start + step]],
                            [False] * len(new) + [True]) for start in range(0, len(stack), step)], []
    rows = [tuple(key) + (tile,) for key, tile in zip(keys.tolist(), stack)]
    for position in np.flatnonzero(edge).tolist():  # cut to the extent
        key = rows[position][:-1]
        rows[position] = key + (stack[position][tuple(slice(0, min(n, e - k * n))
                                                      for k, n, e in zip(key, new, extent))],)
    return [], rows


def _all_keys(grid: tuple[int, ...]) -> np.ndarray:
    """Every key of a grid (m x d int64), in key order."""
    return np.indices(grid).reshape(len(grid), -1).T.astype(np.int64)
