"""Storing query results as tiles: CREATE TENSOR ... AS, INSERT ... query, checked against the layout.

A result is consumed batch by batch (it may be a spool larger than memory) and written through a
TileWriter; keys are checked across batches (in range, unique: the set of keys seen is small
beside the tiles), and a failure in a later batch rolls back the whole statement.
"""
from __future__ import annotations

import itertools
import math
from typing import Callable, Iterable, Iterator, Optional, Sequence, Union

import numpy as np

from trdb.errors import DataError, IntegrityError, ProgrammingError, QueryCancelled
from trdb.execution.column_batch import is_columns
from trdb.execution.result import Result, TensorLayout, layout_of
from trdb.execution.spool import joined_batches, row_batches
from trdb.ingest.tiling import CHUNK_BYTES
from trdb.kernels.axis_reductions import all_in_rows
from trdb.kernels.backend import to_host
from trdb.kernels.distinct import all_distinct
from trdb.kernels.sparse import is_sparse, nbytes
from trdb.statements.context import StatementContext
from trdb.statements.written_keys import WrittenKeys
from trdb.storage.tensor_meta import TensorMeta, validate_layout
from trdb.storage.tile_writer import BATCH_TILES, STACK_TILES, TileWriter

BeforeWrite = Callable[[np.ndarray], None]


def result_columns(result: Result, what: str) -> tuple[list[int], int]:
    """Key positions and the tensor position of a result that is to be stored."""
    keys = [i for i, c in enumerate(result.schema) if c.is_key]
    tensors = [i for i, c in enumerate(result.schema) if c.is_tensor]
    if len(tensors) != 1 or len(keys) + 1 != len(result.schema):
        kinds = ", ".join(f"{c.name} {c.type}" for c in result.schema)
        raise ProgrammingError(f"{what} needs a query giving key columns and one tensor column, got ({kinds})")
    return keys, tensors[0]


def check_stack(meta: TensorMeta, keys: np.ndarray, stack: np.ndarray, what: str, seen: set) -> np.ndarray:
    """`check_tiles` of tiles of one shape stacked in one array `(n, *tile)`, with no step per tile but the
    set of keys seen; the stack is cast to the tensor's dtype. A batch that fails is checked as a list of
    tiles, for the error of the first tile that fails."""
    in_range = len(stack) == len(keys) and stack.ndim == len(meta.tile) + 1 and bool(meta.keys_in_range(keys).all())
    passing = in_range and np.can_cast(stack.dtype, meta.dtype, casting="same_kind") and \
        _shapes_fit(meta, keys, stack.shape[1:])
    if passing and isinstance(seen, WrittenKeys) and seen.marks:  # the places as one array, marked at once
        places = np.ravel_multi_index(tuple(keys.T), meta.grid)
        passing = _unique(places) and not seen.any_of(places)
        if passing:
            seen.mark(places)
    elif passing:
        positions = key_positions(meta, keys)
        passing = len(set(positions)) == len(positions) and seen.isdisjoint(positions)
        if passing:
            seen.update(positions)
    if not passing:
        return np.stack(check_tiles(meta, keys, list(stack), what, seen)) if len(stack) else stack
    return stack if stack.dtype == meta.dtype else stack.astype(meta.dtype)


def _unique(places: np.ndarray) -> bool:
    """Whether no place repeats (a batch's keys come sorted: then each is above the one before)."""
    return all_distinct(places)


def _shapes_fit(meta: TensorMeta, keys: np.ndarray, shape: tuple) -> bool:
    """Whether the tile under each key (all in range) has `shape`: for full tiles, that no key lands on the
    last, smaller tile of a ragged axis (no shape computed per key)."""
    if tuple(shape) == tuple(meta.tile):
        return all(bool((keys[:, axis] < meta.grid[axis] - 1).all()) for axis in range(keys.shape[1])
                   if meta.shape[axis] % meta.tile[axis])
    return bool((meta.tile_shapes_at(keys) == np.asarray(shape, np.int64)).all())


def key_positions(meta: TensorMeta, keys: np.ndarray) -> list:
    """Each key row's place in the tile grid, as the set of keys a write has seen holds it: an int where
    the grid's positions fit an int64, else the key tuple. Keys outside the grid get some position (the
    range check fails them first)."""
    if keys.shape[1] == 0:
        return [()] * len(keys)
    if not 0 < math.prod(meta.grid) < 2 ** 62:  # an empty grid (a 0-length axis) has no positions
        return list(zip(*keys.T.tolist()))
    return np.ravel_multi_index(tuple(keys.T), meta.grid, mode="clip").tolist()


def check_tiles(meta: TensorMeta, keys: np.ndarray, tiles: Sequence, what: str,
                seen: Optional[set] = None) -> list:
    """Every key in range, unique (also among the keys in `seen`, which grows), every tile (dense or CSR) of
    the shape the layout gives that key; tiles cast to dtype. Checked over the whole batch at once; the
    first tile that fails is then checked alone, for its error (as if they were checked one by one)."""
    seen = set() if seen is None else seen
    tiles = [tile if is_sparse(tile) else np.asarray(tile) for tile in tiles]
    keys = np.asarray(keys, dtype=np.int64).reshape(len(tiles), len(meta.keys))
    key_tuples = list(map(tuple, keys.tolist()))
    positions = key_positions(meta, keys)
    failing = np.flatnonzero(~_passing(meta, keys, positions, tiles, seen))
    if len(failing):
        first = int(failing[0])
        seen.update(positions[:first])
        _check_each(meta, key_tuples[first:], positions[first:], tiles[first:], what, seen)  # raises
    seen.update(positions)
    if all(tile.dtype == meta.dtype for tile in tiles):
        return tiles
    return [tile.astype(meta.dtype, copy=False) for tile in tiles]


def _passing(meta: TensorMeta, keys: np.ndarray, positions: list, tiles: list, seen: set) -> np.ndarray:
    """Which tiles pass every check of `check_tiles` (a key repeated in the batch fails where it repeats)."""
    passing = meta.keys_in_range(keys)
    if keys.shape[1]:
        order = np.lexsort(keys.T[::-1])  # stable: of equal keys, the later one comes later
        repeated = all_in_rows(keys[order][1:] == keys[order][:-1])
        passing[order[1:][repeated]] = False
    else:  # a 0-d tensor's one key, ()
        passing[1:] = False
    if seen:
        passing &= np.fromiter((key not in seen for key in positions), dtype=bool, count=len(positions))
    passing &= _right_shapes(meta, keys, tiles)
    refused = {dtype for dtype in {t.dtype for t in tiles} if not np.can_cast(dtype, meta.dtype, casting="same_kind")}
    if refused:
        passing &= np.fromiter((t.dtype not in refused for t in tiles), dtype=bool, count=len(tiles))
    return passing


def _right_shapes(meta: TensorMeta, keys: np.ndarray, tiles: list) -> np.ndarray:
    """Whether each tile has the shape the layout gives its key (edge tiles are smaller)."""
    shapes = [tile.shape for tile in tiles]
    if any(len(shape) != len(meta.tile) for shape in shapes):
        return np.fromiter((shape == meta.tile_shape_at(key) for shape, key in zip(shapes, keys.tolist())),
                           dtype=bool, count=len(shapes))
    expected = meta.tile_shapes_at(keys)
    return all_in_rows(np.array(shapes, dtype=np.int64).reshape(expected.shape) == expected)


def _check_each(meta: TensorMeta, keys: list, positions: list, tiles: list, what: str, seen: set) -> None:
    """The checks of `check_tiles`, one tile at a time: the first that fails raises its error."""
    for key, position, tile in zip(keys, positions, tiles):
        if not meta.key_in_range(key):
            raise DataError(f"{what}: key {key} is outside the tile grid {meta.grid} of {meta.name}")
        if position in seen:
            raise IntegrityError(f"{what}: key {key} occurs more than once")
        seen.add(position)
        expected = meta.tile_shape_at(key)
        if tile.shape != expected:
            raise DataError(f"{what}: the tile under key {key} has shape {tile.shape}, but {meta.name}'s "
                            f"layout (shape {meta.shape}, tile {meta.tile}) needs {expected}")
        if not np.can_cast(tile.dtype, meta.dtype, casting="same_kind"):
            raise DataError(f"{what}: a {tile.dtype} tile cannot be stored in {meta.name} ({meta.dtype})")


def tile_batches(result: Result, what: str, batch_bytes: int) -> Iterator[tuple[np.ndarray, Union[list, np.ndarray]]]:
    """The result as write batches of up to `batch_bytes` of tiles or BATCH_TILES tuples (STACK_TILES in stacks):
    keys (sorted within a batch, so that checks and errors do not depend on the order workers produced them there) and host
    tiles: numpy arrays, CSR tiles kept CSR; or, for column batches, the stack of their tiles. An UPDATE
    deletes each batch's stored tiles in one statement, which reads the whole tile table: in batches of 64
    small tiles, an UPDATE of 375,000 tiles of 64 floats ran 5,860 DELETEs, a minute."""
    keys, value = result_columns(result, what)
    parts = _column_runs(row_batches(result.rows), keys, value, batch_bytes)
    for stacked, group in itertools.groupby(parts, key=lambda part: isinstance(part, tuple)):
        yield from group if stacked else _row_batches(group, keys, value, batch_bytes, what)


def _column_runs(batches: Iterable, keys: list[int], value: int, batch_bytes: int) -> Iterator:
    """The column batches among `batches` joined into (keys, stack) write batches, sorted by key, of up to
    STACK_TILES tuples or `batch_bytes` of tiles; list batches handed on as they come."""
    columns: list = []
    for batch in batches:
        stacked = is_columns(batch) and batch.is_tile[value] and not any(batch.is_tile[k] for k in keys)
        if columns and not (stacked and _same_tiles(batch, columns[0], value)):
            yield _joined_columns(columns, keys, value)
            columns = []
        if not stacked:
            yield batch
            continue
        columns.append(batch)
        if sum(map(len, columns)) >= STACK_TILES or sum(b.columns[value].nbytes for b in columns) >= batch_bytes:
            yield _joined_columns(columns, keys, value)
            columns = []
    if columns:
        yield _joined_columns(columns, keys, value)


def _same_tiles(batch, other, value: int) -> bool:
    """Whether two column batches' tiles stack together (one shape, one dtype)."""
    a, b = batch.columns[value], other.columns[value]
    return a.shape[1:] == b.shape[1:] and a.dtype == b.dtype


def _joined_columns(batches: list, keys: list[int], value: int) -> tuple[np.ndarray, np.ndarray]:
    """Column batches as one write batch: an n x m key array in key order, and their tiles' stack in that order."""
    key_array = np.stack([np.concatenate([b.columns[k] for b in batches]) for k in keys], axis=1) \
        if keys else np.zeros((sum(map(len, batches)), 0), np.int64)
    stack = np.concatenate([b.columns[value] for b in batches])
    order = np.lexsort(key_array.T[::-1]) if keys else None
    if order is None or np.array_equal(order, np.arange(len(order))):
        return key_array.astype(np.int64, copy=False), stack
    return key_array[order].astype(np.int64, copy=False), stack[order]


def _row_batches(batches: Iterable, keys: list[int], value: int, batch_bytes: int,
                 what: str) -> Iterator[tuple[np.ndarray, list]]:
    for batch in joined_batches(batches, BATCH_TILES, batch_bytes, lambda row: nbytes(row[value])):
        key_lists = [[row[k] for k in keys] for row in batch]
        if any(None in key for key in key_lists):
            raise DataError(f"{what}: a result key is NULL (from an outer join?); use COALESCE on keys")
        key_array = np.array(key_lists, dtype=np.int64).reshape(len(batch), len(keys))
        order = np.lexsort(key_array.T[::-1]) if len(keys) else np.arange(len(batch))
        yield key_array[order], [_host_tile(batch[i][value]) for i in order.tolist()]


def _host_tile(tile):
    tile = to_host(tile, keep_sparse=True)
    return tile if is_sparse(tile) else np.asarray(tile)


def write_result(sc: StatementContext, meta: TensorMeta, result: Result, what: str,
                 before_write: Optional[BeforeWrite] = None, keep: bool = False,
                 overwrite: bool = False) -> tuple[int, TileWriter]:
    """Check and write a result's tiles batch by batch; `before_write(keys)` runs for each batch before its
    tiles are held (INSERT refuses stored keys, UPDATE deletes them). Returns the tuples written and the
    closed writer: its `statistics` (the tensor's where it held no tile before) and, with `keep`, what it
    wrote (`kept`, for the buffer pool). `overwrite`: TileWriter's (an UPDATE of a small tensor, which deletes
    nothing first)."""
    seen = WrittenKeys(meta.grid)  # key_positions of the keys written
    count = 0
    with TileWriter(sc.db, meta, CHUNK_BYTES, keep=keep, overwrite=overwrite) as writer:
        for keys, tiles in tile_batches(result, what, writer.batch_bytes):
            if sc.interrupted.is_set():
                raise QueryCancelled(f"the statement was cancelled while it wrote the tiles of {meta.name}")
            if keys.shape[1] != len(meta.keys):
                raise ProgrammingError(f"{what}: the query gives {keys.shape[1]} keys, "
                                       f"{meta.name} has {len(meta.keys)}")
            stacked = isinstance(tiles, np.ndarray)
            tiles = check_stack(meta, keys, tiles, what, seen) if stacked else check_tiles(meta, keys, tiles, what, seen)
            if before_write is not None:
                before_write(keys)
            if stacked:
                writer.add_stack(keys, tiles)
            else:
                writer.add_all(keys, tiles)
            count += len(tiles)
    return count, writer


def result_layout(result: Result) -> TensorLayout:
    """The layout of a whole result, found batch by batch (each batch's extent, the largest wins)."""
    layout = None
    for batch in row_batches(result.rows):
        found = layout_of(result.schema, batch)
        if layout is not None:
            found = layout_of(result.schema, [], tuple(max(a, b) for a, b in zip(layout.shape, found.shape)))
        layout = found
    return layout if layout is not None else layout_of(result.schema, [])


def store_rows(sc: StatementContext, name: str, key_names: Optional[Sequence[str]], result: Result) -> TensorMeta:
    """CREATE TENSOR name AS: a new tensor laid out as the result says (keys -> leading axes)."""
    keys, value = result_columns(result, "CREATE TENSOR ... AS")
    layout = result_layout(result)
    column = result.schema[value]
    if len(layout.tile) != len(column.type.tile):
        raise ProgrammingError(f"CREATE TENSOR ... AS: {len(keys)} key columns but the tiles are "
                               f"{len(column.type.tile)}-d; a tensor needs at least as many tile axes as keys")
    names = validate_layout(layout.shape, layout.tile, key_names or [result.schema[k].name for k in keys])
    if len(names) != len(keys):
        raise ProgrammingError(f"CREATE TENSOR {name} ({', '.join(names)}): the query gives {len(keys)} keys")
    meta = sc.catalog.create_tensor(TensorMeta(name, names, column.name, column.type.dtype, layout.shape,
                                               layout.tile, ""))
    _, writer = write_result(sc, meta, result, f"CREATE TENSOR {name} AS")
    return sc.catalog.refresh_statistics(meta, writer.statistics.as_tuple())  # a new tensor's: what it wrote
