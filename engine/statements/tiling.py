"""Cutting dense arrays into tiles and generating FILL tiles, written in bounded chunks."""
from __future__ import annotations

import itertools
import threading
from typing import Callable, Iterator, Optional

import numpy as np

from trdb.errors import QueryCancelled
from trdb.statements.value_fit import cast_checked
from trdb.storage import tile_store
from trdb.storage.database import Database
from trdb.storage.tensor_meta import TensorMeta

CHUNK_BYTES = 256 << 20  # tiles are written in chunks so memory stays bounded for large tensors
CHUNK_TILES = 1 << 16  # and in chunks of tiles: millions of tiny tiles cost far more than their bytes


def grid_keys(meta: TensorMeta) -> Iterator[tuple[int, ...]]:
    return itertools.product(*(range(g) for g in meta.grid))


def tile_slices(meta: TensorMeta, key: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(k * t, min((k + 1) * t, n)) for k, t, n in zip(key, meta.tile, meta.shape))


def write_generated(db: Database, meta: TensorMeta, make_tile: Callable[[tuple[int, ...]], np.ndarray],
                    interrupted: Optional[threading.Event] = None) -> int:
    """Write make_tile(key) for every key of the grid (all-zero tiles are skipped). Returns tiles stored.
    Once `interrupted` is set (the statement was cancelled) it stops with QueryCancelled."""
    keys: list[tuple[int, ...]] = []
    tiles: list[np.ndarray] = []
    pending = written = 0
    for key in grid_keys(meta):
        if interrupted is not None and interrupted.is_set():  # a cheap test: a tile takes microseconds or more
            raise QueryCancelled(f"the statement was cancelled while it wrote the tiles of {meta.name}")
        tile = make_tile(key)
        keys.append(key)
        tiles.append(tile)
        pending += tile.nbytes
        if pending >= CHUNK_BYTES or len(tiles) >= CHUNK_TILES:
            written += tile_store.write_tiles(db, meta, np.array(keys, dtype=np.int64), tiles)
            keys, tiles, pending = [], [], 0
    if tiles:
        written += tile_store.write_tiles(db, meta, np.array(keys, dtype=np.int64), tiles)
    return written


def write_array(db: Database, meta: TensorMeta, array: np.ndarray,
                interrupted: Optional[threading.Event] = None) -> int:
    """Tile a dense array of the tensor's shape and store its non-zero tiles; a value the tensor's dtype
    cannot hold (overflow to inf, an integer out of range) is a DataError."""
    def tile(key: tuple[int, ...]) -> np.ndarray:
        where = tile_slices(meta, key)
        return cast_checked(array[where], meta.dtype, meta.name, [s.start for s in where])
    return write_generated(db, meta, tile, interrupted)
