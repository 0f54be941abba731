"""Cutting dense arrays into tiles and generating FILL tiles, written in bounded batches."""
from __future__ import annotations

import itertools
import mmap
import threading
from typing import Any, Callable, Iterator, Optional, Union

import numpy as np

from trdb.errors import DataError, QueryCancelled
from trdb.ingest.value_fit import cast_checked
from trdb.storage.database import Database
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_store import WrittenStatistics
from trdb.storage.tile_writer import BATCH_BYTES, STACK_TILES, TileWriter

CHUNK_BYTES = BATCH_BYTES  # the bytes of one write batch (tests make it tiny to get many batches)
SLAB_RUN = 4096  # tiles of one slab made and handed to the writer at a time
MAX_STACKED_TILE = 1 << 14  # elements: larger tiles are cut one by one (their Python step is small beside them)


def grid_keys(meta: TensorMeta) -> Iterator[tuple[int, ...]]:
    return itertools.product(*(range(g) for g in meta.grid))


def tile_slices(meta: TensorMeta, key: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(k * t, min((k + 1) * t, n)) for k, t, n in zip(key, meta.tile, meta.shape))


def write_generated(db: Database, meta: TensorMeta, make_tile: Callable[[tuple[int, ...]], np.ndarray],
                    interrupted: Optional[threading.Event] = None,
                    after_batch: Optional[Callable[[], None]] = None) -> WrittenStatistics:
    """Write make_tile(key) for every key of the grid (all-zero tiles too). Returns the statistics of the tiles
    stored (a new tensor's own: no query need count them).
    Once `interrupted` is set (the statement was cancelled) it stops with QueryCancelled. Tiles are made
    as the writer takes them, a run at a time (TileWriter.add_stream)."""
    def generated() -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
        for key in grid_keys(meta):
            if interrupted is not None and interrupted.is_set():  # a cheap test: a tile takes microseconds or more
                raise QueryCancelled(f"the statement was cancelled while it wrote the tiles of {meta.name}")
            yield key, make_tile(key)
    with TileWriter(db, meta, CHUNK_BYTES, after_batch) as writer:
        writer.add_stream(generated())
    return writer.statistics


def write_array(db: Database, meta: TensorMeta, array: np.ndarray,
                interrupted: Optional[threading.Event] = None) -> WrittenStatistics:
    """Tile a dense array of the tensor's shape and store every tile (zeros are values), returning the statistics
    of the tiles stored (`write_generated`'s); a value the tensor's dtype
    cannot hold (overflow to inf, an integer out of range) is a DataError. A memory-mapped array is read
    a slab at a time and its pages are let go after each batch, so it is never resident whole."""
    def check() -> None:
        if interrupted is not None and interrupted.is_set():
            raise QueryCancelled(f"the statement was cancelled while it wrote the tiles of {meta.name}")
    with TileWriter(db, meta, CHUNK_BYTES, _page_dropper(array)) as writer:
        for keys, tiles in _array_tiles(meta, array, writer.batch_bytes):
            check()
            keys = np.asarray(keys, dtype=np.int64).reshape(len(keys), len(meta.keys))
            if not isinstance(tiles, np.ndarray):
                writer.add_all(keys, tiles)
                continue
            for start in range(0, len(tiles), STACK_TILES):  # a stack of a million small tiles: a batch at a time
                if start:
                    check()
                writer.add_stack(keys[start:start + STACK_TILES], tiles[start:start + STACK_TILES])
    return writer.statistics


def _stackable(meta: TensorMeta, batch_bytes: int) -> bool:
    """Whether the array's full rows of tiles can be cut as stacks: small tiles (a row of them within a write
    batch) that divide every axis but the first (the last row, if ragged, is cut tile by tile)."""
    if not meta.shape or len(meta.grid) != len(meta.tile) or np.prod(meta.tile) > MAX_STACKED_TILE or \
            np.prod(meta.grid[1:]) < 2 and meta.grid[0] < 2:
        return False  # (fewer keys than axes: the slabs below cut it)
    row_bytes = np.dtype(meta.dtype).itemsize * np.prod(meta.shape[1:], dtype=np.float64) * meta.tile[0]
    return row_bytes <= batch_bytes and all(n % t == 0 for n, t in zip(meta.shape[1:], meta.tile[1:]))


def _stacked_tiles(meta: TensorMeta, array: np.ndarray,
                   batch_bytes: int) -> Iterator[tuple[Any, Union[list, np.ndarray]]]:
    """The array's tiles in key order as stacks `(n, *tile)` of the full rows of tiles, a write batch's bytes
    of rows at a time (one cast, one reshape and one copy each), then the ragged last row tile by tile."""
    first, rest = meta.tile[0], meta.grid[1:]
    row_bytes = np.dtype(meta.dtype).itemsize * int(np.prod(meta.shape[1:], dtype=np.int64)) * first
    rows_per_run = max(1, batch_bytes // max(row_bytes, 1))
    full_rows = meta.shape[0] // first
    order = (0, *range(2, 2 * len(rest) + 2, 2), 1, *range(3, 2 * len(rest) + 2, 2))  # grid axes, then tile axes
    for start in range(0, full_rows, rows_per_run):
        stop = min(full_rows, start + rows_per_run)
        try:
            run = cast_checked(array[start * first:stop * first], meta.dtype, meta.name, [start * first])
        except DataError:
            _first_misfit(meta, array, range(start, stop))
            raise
        split = run.reshape(stop - start, first, *[n for g, t in zip(rest, meta.tile[1:]) for n in (g, t)])
        stack = np.ascontiguousarray(split.transpose(order)).reshape(-1, *meta.tile)
        keys = np.indices((stop - start, *rest)).reshape(len(meta.tile), -1).T
        keys[:, 0] += start
        yield keys, stack
    if full_rows < meta.grid[0]:
        for key in grid_keys(meta):
            if key[0] == full_rows:
                where = tile_slices(meta, key)
                yield [key], [cast_checked(array[where], meta.dtype, meta.name, [s.start for s in where])]


def _first_misfit(meta: TensorMeta, array: np.ndarray, firsts: range) -> None:
    """Raise the DataError of the first tile (in key order) among these rows of tiles that holds a misfit."""
    for key in grid_keys(meta):
        if key[0] in firsts:
            where = tile_slices(meta, key)
            cast_checked(array[where], meta.dtype, meta.name, [s.start for s in where])


def _array_tiles(meta: TensorMeta, array: np.ndarray,
                 batch_bytes: int = CHUNK_BYTES) -> Iterator[tuple[Any, Union[list, np.ndarray]]]:
    """The array's tiles in key order (keys, and a list of tiles or a stack of them): small tiles that divide
    the array as stacks (_stacked_tiles), else a slab of the tiles that share a first key at once, cast in one go,
    where the slab is small (many small tiles: one cast instead of one a tile), else one tile at a time.
    A value that does not fit is reported as the tile-by-tile cast reports it (the first tile holding one)."""
    if _stackable(meta, batch_bytes):
        yield from _stacked_tiles(meta, array, batch_bytes)
        return

    def tile(key: tuple[int, ...]) -> np.ndarray:
        where = tile_slices(meta, key)
        return cast_checked(array[where], meta.dtype, meta.name, [s.start for s in where])
    slab_bytes = np.dtype(meta.dtype).itemsize * (np.prod(meta.shape[1:], dtype=np.float64) * meta.tile[0]
                                                  if meta.shape else 1)
    if not meta.shape or slab_bytes > CHUNK_BYTES or np.prod(meta.grid[1:]) < 2:
        for key in grid_keys(meta):
            yield [key], [tile(key)]
        return
    runs = _slab_runs(meta)
    for first in range(meta.grid[0]):
        rows = tile_slices(meta, (first, *[0] * (len(meta.grid) - 1)))[0]
        try:
            slab = cast_checked(array[rows], meta.dtype, meta.name, [rows.start])
        except DataError:
            _first_misfit(meta, array, range(first, first + 1))
            raise
        for rests, inner in runs():
            yield [(first, *rest) for rest in rests], [slab[where] for where in inner]


def _slab_runs(meta: TensorMeta) -> Callable[[], Iterator[tuple[list, list]]]:
    """A slab's runs of SLAB_RUN tiles, each the keys after the first and where each tile lies in a slab: made
    as the first slab asks for them (a cancelled statement stops within a run: a slab of a million 1 x 1
    tiles took seconds to make whole), then the same runs again for every other slab."""
    made: list[tuple[list, list]] = []
    rests = itertools.product(*(range(g) for g in meta.grid[1:]))

    def runs() -> Iterator[tuple[list, list]]:
        yield from made
        while run := list(itertools.islice(rests, SLAB_RUN)):
            made.append((run, [(slice(None), *tile_slices(meta, (0, *rest))[1:]) for rest in run]))
            yield made[-1]
    return runs


def _page_dropper(array: np.ndarray) -> Optional[Callable[[], None]]:
    """For an array over a file mapping (np.load(mmap_mode='r'), np.memmap): a function that lets the
    pages read so far go. They stay in the page cache, but no longer count as this process's memory;
    without it, reading a mapped file larger than memory_limit leaves it all resident."""
    mapping = _mapping_of(array)
    if mapping is None or not hasattr(mapping, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return None

    def drop() -> None:
        try:
            mapping.madvise(mmap.MADV_DONTNEED)  # a read-only or clean mapping: the data stays in the file
        except (OSError, ValueError):  # closed, or a platform that refuses: only memory use suffers
            pass
    return drop if _read_only(mapping) else None


def _mapping_of(array) -> Optional[mmap.mmap]:
    """The mmap object under an array and its views, if there is one."""
    base = array
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    return base


def _read_only(mapping: mmap.mmap) -> bool:
    """Dropping pages of a private writable mapping would lose changes made through it: only read-only ones."""
    try:
        mapping[:0] = b""  # writes nothing; raises TypeError on a read-only mapping
    except TypeError:
        return True
    except ValueError:  # closed
        return False
    return False
