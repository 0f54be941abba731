"""A tensor's tiles put together into one read-only array (absent tiles are zeros): a DenseEinsum's operand."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from trdb.kernels.sparse import dense
from trdb.kernels.tile_blocks import blocks, fills_grid
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_codec import one_buffer


def the_one_tile(meta: TensorMeta, tiles: list) -> Optional[np.ndarray]:
    """The tensor's only tile when it is the whole tensor, dense and read-only (as the buffer pool keeps it)."""
    if len(tiles) == 1 and isinstance(tiles[0], np.ndarray) and tiles[0].shape == tuple(meta.shape) \
            and not tiles[0].flags.writeable:
        return tiles[0]
    return None


def whole_array(meta: TensorMeta, keys: np.ndarray, tiles: list) -> np.ndarray:
    """The tensor of shape `meta.shape` whose tile under key (K1..Kd) is `tiles[n]` for `keys[n]`."""
    joined = _row_tiles_in_one_buffer(meta, keys, tiles)
    if joined is not None:
        return joined
    runs = getattr(tiles, "runs", ())
    if runs:
        return _placed_runs(meta, keys, tiles, runs)
    regions = [tuple(slice(k * t, k * t + n) for k, t, n in zip(key, meta.tile, np.shape(tile)))
               for key, tile in zip(keys.tolist(), tiles)]  # the keys cover the leading axes; the trailing ones are whole
    # every element written by a tile: no zeros to write first (writing them costs as much as a third of the copy)
    out = (np.empty if _covers(meta, regions) else np.zeros)(meta.shape, dtype=meta.dtype)
    for where, tile in zip(regions, tiles):
        out[where] = dense(tile)
    out.flags.writeable = False  # shared by every statement that reads this version
    return out


def _placed_runs(meta: TensorMeta, keys: np.ndarray, tiles: list, runs: tuple) -> np.ndarray:
    """`whole_array` of tiles read in runs of stacks (storage/tile_runs.py): each run of full tiles written through
    a view of the array as blocks (one assignment, no step per tile: 200,000 tiles of 1 x 8 took 1.1 s one by
    one), the other tiles one by one."""
    tile = tuple(meta.tile)
    padded = np.zeros((len(keys), len(tile)), dtype=np.int64)  # the trailing axes, without keys, at 0
    padded[:, :keys.shape[1]] = keys
    out = (np.empty if _runs_cover(meta, padded, tiles, runs) else np.zeros)(meta.shape, dtype=meta.dtype)
    full = tuple(n // t for n, t in zip(meta.shape, tile))
    view = blocks(out[tuple(slice(0, g * t) for g, t in zip(full, tile))], tile)
    placed = np.zeros(len(tiles), dtype=bool)
    for start, stack in runs:
        at = padded[start:start + len(stack)]
        if stack.shape[1:] == tile and len(at) and at.min() >= 0 and (at < np.array(full)).all():
            view[tuple(at.T)] = stack
            placed[start:start + len(stack)] = True
    for n in np.flatnonzero(~placed).tolist():
        tile_n = tiles[n]
        out[tuple(slice(k * t, k * t + s) for k, t, s in zip(padded[n].tolist(), tile, np.shape(tile_n)))] = dense(tile_n)
    out.flags.writeable = False  # shared by every statement that reads this version
    return out


def _runs_cover(meta: TensorMeta, keys: np.ndarray, tiles: list, runs: tuple) -> bool:
    """`_covers` of tiles under `keys` (n x ndim), the shape each place has checked for all of them at once (a run's
    tiles have its stack's shape)."""
    grid = [-(-n // t) for n, t in zip(meta.shape, meta.tile)]
    if len(tiles) != len(keys) or not fills_grid(keys, grid):
        return False
    expected = np.minimum(np.array(meta.tile), np.array(meta.shape) - keys * np.array(meta.tile))
    shapes = np.full(expected.shape, -1, dtype=np.int64)
    in_runs = np.zeros(len(tiles), dtype=bool)
    for start, stack in runs:
        if stack.ndim - 1 == len(meta.tile):
            shapes[start:start + len(stack)] = stack.shape[1:]
            in_runs[start:start + len(stack)] = True
    for n in np.flatnonzero(~in_runs).tolist():
        if np.ndim(tiles[n]) == len(meta.tile):
            shapes[n] = np.shape(tiles[n])
    return bool((shapes == expected).all())


def _covers(meta: TensorMeta, regions: list[tuple[slice, ...]]) -> bool:
    """Whether the regions are every tile's whole region, each once."""
    if not regions:
        return False
    axes = len(regions[0])
    grid = [-(-n // t) for n, t in zip(meta.shape[:axes], meta.tile)]
    if len(regions) != math.prod(grid) or len({tuple(r.start for r in where) for where in regions}) != len(regions):
        return False
    return all(0 <= r.start < n and r.stop == min(r.start + t, n) for where in regions
               for r, t, n in zip(where, meta.tile, meta.shape))


def _row_tiles_in_one_buffer(meta: TensorMeta, keys: np.ndarray, tiles: list) -> Optional[np.ndarray]:
    """The tensor as a read-only view of the buffer its tiles lie in, when they are its row tiles (every
    other axis whole), keyed 0, 1, ... in order and back to back there: a MINIMIZE step's new tiles of a
    parameter (statements/minimize._stepped), which the next step reads whole without a copy, or the
    bytes one read of its tile table decoded them from."""
    if len(tiles) < 2 or keys.ndim != 2 or keys.shape[1] == 0 or tuple(meta.tile[1:]) != tuple(meta.shape[1:]) \
            or np.shape(tiles[0]) != tuple(meta.tile):
        return None
    if (keys[:, 1:] != 0).any() or not np.array_equal(keys[:, 0], np.arange(len(tiles))):
        return None
    base = one_buffer(tiles)
    if base is None or tiles[0].dtype != meta.dtype or base.nbytes != math.prod(meta.shape) * meta.dtype.itemsize:
        return None
    view = base.reshape(-1).view(np.uint8).view(meta.dtype).reshape(meta.shape)
    view.flags.writeable = False
    return view
