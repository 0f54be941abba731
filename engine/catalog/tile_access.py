"""TileAccess: a catalog's tiles, read through the database's buffer pool and kept there once written.

Tiles are shared by (tile table, data version), so no connection computes from tiles another one has
replaced. A read's tiles are checked (keys unique, inside the grid); a read outside a transaction while
another connection committed is refused as stale. Runs of small tiles are kept as stacks
(storage/tile_runs.py), which scans hand on as column batches.
"""
from __future__ import annotations

import math
from typing import Iterator, Optional, Union

import numpy as np

from trdb.catalog import external
from trdb.catalog.names import fold
from trdb.errors import DataError, StaleSnapshot
from trdb.kernels.axis_reductions import all_in_rows, any_in_rows
from trdb.kernels.sparse import count_nonzero, is_sparse
from trdb.storage import tile_store
from trdb.storage.buffer_pool import TensorTiles
from trdb.storage.external_reads import read_all
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_runs import StackedTiles, as_tile_runs, tile_views
from trdb.storage.tile_store import TileIndex
from trdb.storage.tile_writer import WrittenTiles
from trdb.storage.whole_tensor import the_one_tile, whole_array

MAX_UNREAD_WRITES = 2  # writes in a row, no read between, that keep a tensor each from the one kept before


class TileAccess:
    """The tile reads and writes-kept of a catalog (its base class): `db`, `pool`, `generation` and the
    mirror of tensors (`_tensors`) are the catalog's."""

    def tiles(self, meta: TensorMeta) -> TensorTiles:
        """All tiles of a tensor (dense arrays or CSR tiles), through the buffer pool."""
        if meta.external:
            key, dataset = external.whole_key(self.db, meta)
            return self.pool.get(key, lambda: read_all(dataset, meta))
        kept = self._kept(meta)
        return kept.tiles() if isinstance(kept, StackedTiles) else kept

    def tile_stacks(self, meta: TensorMeta) -> Optional[StackedTiles]:
        """A stored tensor's tiles as the stacks the buffer pool keeps them in after a write (no view of each
        tile), read through the pool as `tiles` reads them; None: `tiles` gives them."""
        if meta.external:
            return None
        kept = self._kept(meta)
        return kept if isinstance(kept, StackedTiles) else None

    def _kept(self, meta: TensorMeta) -> Union[TensorTiles, StackedTiles]:
        """A stored tensor's tiles as the buffer pool keeps them, read on a miss."""
        return self.pool.get((meta.table, self._seen_version(meta)), lambda: self._read_tiles(meta))

    def whole_array(self, meta: TensorMeta) -> np.ndarray:
        """A stored tensor as one read-only array (absent tiles are zeros): its one tile when that is the
        whole tensor, else built from its tiles once per data version and kept in the buffer pool beside them."""
        whole_key = self._whole_key(meta)
        kept = self.pool.hit(whole_key)
        if kept is not None:
            return kept
        keys, tiles = self.tiles(meta)
        single = the_one_tile(meta, tiles)
        if single is not None:
            return single
        return self.pool.get(whole_key, lambda: whole_array(meta, keys, tiles))

    def kept_whole_array(self, meta: TensorMeta) -> Optional[np.ndarray]:
        """whole_array(meta) where that puts nothing together (the tensor is one tile, or its array is kept),
        else None."""
        if tuple(meta.tile) == tuple(meta.shape):
            return self.whole_array(meta)
        return self.pool.hit(self._whole_key(meta))

    def _whole_key(self, meta: TensorMeta) -> tuple:
        return meta.table, self._seen_version(meta), "whole"

    def _seen_version(self, meta: TensorMeta) -> int:
        """The data version of a stored tensor that this connection sees now, which is what DuckDB reads
        for it: a plan made before this transaction's writes (MINIMIZE's steps) names an older version,
        which other connections may still read."""
        known = self._tensors.get(fold(meta.name))
        return known.version if known is not None and known.table == meta.table else meta.version

    def keep_written(self, meta: TensorMeta, keys: np.ndarray, tiles: Union[list, np.ndarray]) -> None:
        """`tiles` (dense, of the tensor's dtype, or CSR as a read gave them; or one stack `(n, *tile)` of
        dense ones; under `keys`: n x m int64) were just written as the whole tensor `meta` (its new version):
        the buffer pool keeps them, read-only, so that the next scan reads no tile back."""
        if isinstance(tiles, np.ndarray):  # one run: its stack in key order, no step per tile
            order = tile_store.key_order(keys)
            stack = tiles if order is None else tiles[order]
            keys = keys if order is None else keys[order]
            stack.flags.writeable = False
            self._put(meta, StackedTiles(keys, ((0, stack),)))
            return
        keys, tiles = tile_store.sorted_by_key(keys, tiles)
        tiles = as_tile_runs(tiles)  # a scan hands the runs of small tiles on as column batches
        for tile in tiles:
            if not is_sparse(tile):  # CSR tiles come from a read (kept_for_write): as it made them
                tile.flags.writeable = False
        self._put(meta, (keys, tiles))

    def _put(self, meta: TensorMeta, tiles: Union[TensorTiles, StackedTiles]) -> None:
        """The pool keeps a write's tiles as `meta`'s contents, counting the writes kept with no read between."""
        self.pool.put((meta.table, meta.version), tiles, self._unread_writes.pop(meta.table, 0) + 1)

    def kept_for_write(self, meta: TensorMeta) -> Optional[Union[TensorTiles, StackedTiles]]:
        """The tiles of the version of a stored tensor this connection sees, where the buffer pool keeps them
        (nothing is read: None otherwise), for a write to build the new contents from (`keep_updated`,
        `keep_inserted`, `keep_deleted`); None too where MAX_UNREAD_WRITES writes kept them one from another
        with no read between: a loop of INSERTs would copy the whole tensor at each (200,000 tiles of 8 x 8:
        17 -> 77 ms an INSERT), where the next scan reads it once. A DELETE and an INSERT in turns keep it
        (the DELETE's query reads it)."""
        if meta.external:
            return None
        key = (meta.table, self._seen_version(meta))
        writes = self.pool.unread_writes(key)
        kept = self.pool.peek(key) if writes < MAX_UNREAD_WRITES else None
        if kept is not None:
            self._unread_writes[meta.table] = writes  # what `keep_written` counts on
        return kept

    def keep_updated(self, meta: TensorMeta, before: Union[TensorTiles, StackedTiles], written: WrittenTiles) -> None:
        """An UPDATE replaced the tiles under `written`'s keys (what its writer inserted, tiles of the tensor's
        dtype) in the contents `before` (from `kept_for_write`), giving `meta` (its new version): the buffer pool
        keeps the new contents, so that the next scan reads no tile back. Unless a new tile is stored CSR, or
        came CSR and is stored dense (a read gives another array than the one written): then the next scan
        reads the tensor again."""
        if not written.all_dense:
            return
        old_keys = _keys_of(before)
        width = len(meta.keys)
        new_keys = np.concatenate([keys for keys, _ in written.batches] + [np.zeros((0, width), np.int64)])
        # an UPDATE writes stored keys, each once: as many as before are all of them
        whole = len(new_keys) == len(old_keys)
        left = np.zeros(0, np.int64) if whole or not len(old_keys) else \
            np.flatnonzero(~_rows_in(old_keys, new_keys, meta.grid))
        stacks = [tiles for _, tiles in written.batches]
        if not len(left) and stacks and all(isinstance(t, np.ndarray) for t in stacks) and \
                len({(t.shape[1:], t.dtype) for t in stacks}) == 1:
            self._keep_stacks(meta, new_keys, stacks)  # every tile replaced, all of one shape
            return
        replaced = _replaced_in_stack(old_keys, _one_stack(before), new_keys, stacks, meta.grid)
        if replaced is not None:  # some tiles of one stacked run replaced: a copy of it, by whole arrays
            self.keep_written(meta, old_keys, replaced)
            return
        old_tiles = _listed(before)[1]
        tiles: list = []
        for stack in stacks:
            tiles.extend(stack if isinstance(stack, list) else tile_views(stack))
        # a view (of a write batch's stack, whose tiles all go in) is kept as it is: the runs are stacked again
        tiles = [tile if tile.flags.c_contiguous else np.array(tile, order="C") for tile in tiles]
        keys = np.concatenate([new_keys, old_keys[left]])
        self.keep_written(meta, keys, tiles + [old_tiles[i] for i in left.tolist()])

    def keep_inserted(self, meta: TensorMeta, before: Union[TensorTiles, StackedTiles], written: WrittenTiles) -> None:
        """An INSERT added the tiles under `written`'s keys (none of them stored before) to the contents `before`
        (from `kept_for_write`), giving `meta` (its new version): the buffer pool keeps the new contents where the old
        ones are one stacked run (or none) and the new tiles dense, of its shape and dtype, stored dense: a copy of
        both in key order. Else the next scan reads the tensor again (at 200,000 tiles of 8 x 8, 35-40 ms)."""
        old_keys, old_stack = _keys_of(before), _one_stack(before)
        if not written.all_dense or not written.batches or (len(old_keys) and old_stack is None):
            return
        stacks = [_as_stack(tiles) for _, tiles in written.batches] + ([old_stack] if len(old_keys) else [])
        if any(stack is None for stack in stacks) or len({(t.shape[1:], t.dtype) for t in stacks}) != 1:
            return
        keys = np.concatenate([keys for keys, _ in written.batches] + [old_keys])
        self.keep_written(meta, keys, np.concatenate(stacks))

    def keep_deleted(self, meta: TensorMeta, before: Union[TensorTiles, StackedTiles], deleted: np.ndarray) -> None:
        """A DELETE removed the stored tiles under `deleted` (keys n x m) from the contents `before` (from
        `kept_for_write`), giving `meta` (its new version): the buffer pool keeps what is left (a copy of a stacked
        run, else the tiles themselves), so that the next scan reads no tile back."""
        old_keys, stack = _keys_of(before), _one_stack(before)
        left = np.flatnonzero(~_rows_in(old_keys, deleted, meta.grid))
        if stack is not None:
            self.keep_written(meta, old_keys[left], stack[left])
            return
        old_tiles = _listed(before)[1]
        self.keep_written(meta, old_keys[left], [old_tiles[i] for i in left.tolist()])

    def _keep_stacks(self, meta: TensorMeta, keys: np.ndarray, stacks: list[np.ndarray]) -> None:
        """`keep_written` of the whole tensor written as stacks of one shape: in key order already (an UPDATE
        of a scan in order), each stack is a run of the kept tiles as it is, none copied into one."""
        if len(stacks) == 1 or tile_store.key_order(keys) is not None:
            self.keep_written(meta, keys, np.concatenate(stacks) if len(stacks) > 1 else stacks[0])
            return
        runs, at = [], 0
        for stack in stacks:
            stack.flags.writeable = False
            runs.append((at, stack))
            at += len(stack)
        self._put(meta, StackedTiles(keys, tuple(runs)))

    def external_reads(self, meta: TensorMeta, partition: int = 0, partitions: int = 1,
                       columns: tuple[int, ...] = (), read_bytes: int = 16 << 20) -> Iterator[TensorTiles]:
        """An external tensor's tiles of one partition, in reads of about `read_bytes` (location checked now)."""
        return external.partition_reads(self.db, meta, partition, partitions, columns, read_bytes)

    def _read_tiles(self, meta: TensorMeta) -> Union[TensorTiles, StackedTiles]:
        read = tile_store.read_stacks(self.db, meta)
        self._check_snapshot()
        _check_keys(meta, _keys_of(read))
        return read

    def streams(self, meta: TensorMeta) -> bool:
        """Whether a scan should read the tensor in bounded batches: too large for the buffer pool to keep."""
        return not self.pool.would_keep(tile_store.estimated_size(meta))

    def tile_index(self, meta: TensorMeta, partition: int = 0, partitions: int = 1,
                   columns: tuple[int, ...] = ()) -> tuple[TileIndex, np.ndarray]:
        """Where the tiles of one partition (those whose key columns `columns` hash to it) are stored, and
        each one's decoded bytes, with the keys checked as a whole read checks them (a duplicate key
        hashes to one partition, so the partitions' checks together cover the tensor)."""
        index = tile_store.tile_index(self.db, meta, self._partition_filter(meta, partition, partitions, columns))
        self._check_snapshot()
        order = tile_store.key_order(index.keys)
        _check_keys(meta, index.keys if order is None else index.keys[order])
        return index, tile_store.decoded_sizes(meta, index)

    def tile_rows(self, meta: TensorMeta, index: TileIndex, start: int, stop: int, partition: int = 0,
                  partitions: int = 1, columns: tuple[int, ...] = ()) -> TensorTiles:
        """The tiles of rows start..stop-1 of a partition's `index` (one bounded read), sorted by key."""
        where = self._partition_filter(meta, partition, partitions, columns)
        keys, tiles = tile_store.read_tile_rows(self.db, meta, index, start, stop, where)
        self._check_snapshot()
        if len(keys) != stop - start:
            # DuckDB gave rows other row ids (a checkpoint compacts deleted rows): read the same tiles by key
            keys, tiles = tile_store.read_tiles_at(self.db, meta, index.keys[start:stop])
            if len(keys) != stop - start:  # the tiles themselves changed: a write this snapshot should not see
                raise StaleSnapshot("the database changed while the statement read it")
        return keys, tiles

    @staticmethod
    def _partition_filter(meta: TensorMeta, partition: int, partitions: int, columns: tuple[int, ...]) -> Optional[str]:
        if partitions <= 1:
            return None
        return tile_store.partition_filter(meta, columns, partitions, partition)

    def _check_snapshot(self) -> None:
        if not self.db.in_transaction and self.db.file.generation != self.generation:
            # read outside a transaction while another connection committed: the tiles may be newer
            # than the version this statement's catalog names, so they are not used (nor cached)
            raise StaleSnapshot("the database changed while the statement read it")

    def tile_nonzeros(self, meta: TensorMeta):
        """Per stored tile: keys (n x m, sorted), non-zeros and format (storage.tile_codec DENSE/CSR32/CSR64)."""
        if meta.external:  # dense tiles only
            keys, tiles = self.tiles(meta)
            counts = np.array([count_nonzero(t) for t in tiles], dtype=np.int64)
            return keys, counts, np.zeros(len(tiles), dtype=np.int8)
        return tile_store.tile_nonzeros(self.db, meta)


def _check_keys(meta: TensorMeta, keys: np.ndarray) -> None:
    """Stored keys are unique and inside the tile grid (a tampered file may hold anything)."""
    if len(keys) == 0 or keys.shape[1] == 0:
        if len(keys) > 1:
            raise DataError(f'tensor "{meta.name}" has {len(keys)} tuples under its one (empty) key')
        return
    grid = np.asarray(meta.grid, dtype=np.int64)
    outside = np.flatnonzero(any_in_rows((keys < 0) | (keys >= grid)))
    if len(outside):
        raise DataError(f'tensor "{meta.name}" has a tile at key {tuple(keys[outside[0]].tolist())}, '
                        f"outside its tile grid {tuple(grid.tolist())}")
    repeated = np.flatnonzero(all_in_rows(keys[1:] == keys[:-1]))  # read sorted by key
    if len(repeated):
        raise DataError(f'tensor "{meta.name}" has more than one tile at key {tuple(keys[repeated[0]].tolist())}')


def _as_stack(tiles) -> Optional[np.ndarray]:
    """A write batch's tiles as one stack `(n, *tile)`: as they are when stacked, else stacked where all are dense
    arrays of one shape and dtype; None otherwise."""
    if isinstance(tiles, np.ndarray):
        return tiles
    if tiles and all(type(t) is np.ndarray for t in tiles) and len({(t.shape, t.dtype) for t in tiles}) == 1:
        return np.stack(tiles)
    return None


def _keys_of(kept: Union[TensorTiles, StackedTiles]) -> np.ndarray:
    return kept.keys if isinstance(kept, StackedTiles) else kept[0]


def _listed(kept: Union[TensorTiles, StackedTiles]) -> TensorTiles:
    """Kept tiles as a read gives them (keys, tiles)."""
    return kept.tiles() if isinstance(kept, StackedTiles) else kept


def _one_stack(kept: Union[TensorTiles, StackedTiles]) -> Optional[np.ndarray]:
    """The one stack `(n, *tile)` that holds all kept tiles in key order, where they lie in runs of one shape and
    dtype: one run as it is, several (a read of 200,000 tiles comes in batches) joined, a copy, as the caller
    copies anyway (a DELETE of half of them took 0.37 s tile by tile)."""
    runs = kept.runs if isinstance(kept, StackedTiles) else getattr(kept[1], "runs", ())
    count = len(kept.keys) if isinstance(kept, StackedTiles) else len(kept[0])
    stacks = [stack for _, stack in runs]
    if not stacks or sum(map(len, stacks)) != count or len({(s.shape[1:], s.dtype) for s in stacks}) != 1:
        return None
    return stacks[0] if len(stacks) == 1 else np.concatenate(stacks)


def _replaced_in_stack(old_keys: np.ndarray, stack: Optional[np.ndarray], new_keys: np.ndarray, stacks: list,
                       grid: tuple[int, ...]) -> Optional[np.ndarray]:
    """The kept tiles, one stack `(n, *tile)` under `old_keys` (in key order), with the rows under `new_keys`
    replaced by the written stacks' tiles: None where the kept tiles are not one stack, a written batch is not
    a stack of its shape and dtype, or a new key is not among the old (a partial UPDATE of 1% of 200,000
    tiles of 8 x 8 took 280 ms a tile at a time)."""
    if stack is None or not old_keys.shape[1] or not 0 < math.prod(grid) < 2 ** 62:
        return None
    if not stacks or any(not isinstance(t, np.ndarray) or t.shape[1:] != stack.shape[1:] or t.dtype != stack.dtype
                         for t in stacks):
        return None
    old_places = np.ravel_multi_index(old_keys.T, grid)
    new_places = np.ravel_multi_index(new_keys.T, grid)
    positions = np.searchsorted(old_places, new_places)
    if np.any(np.diff(old_places) <= 0) or np.any(positions >= len(old_places)) or \
            np.any(old_places[np.minimum(positions, len(old_places) - 1)] != new_places):
        return None
    out = stack.copy()
    out[positions] = stacks[0] if len(stacks) == 1 else np.concatenate(stacks)
    return out


def _rows_in(rows: np.ndarray, among: np.ndarray, grid: tuple[int, ...]) -> np.ndarray:
    """Which key rows (n x m, in the grid) are among the rows of `among`."""
    if rows.shape[1] == 0:
        return np.full(len(rows), len(among) > 0)
    if 0 < math.prod(grid) < 2 ** 62:  # each key row as its one position in the grid
        return np.isin(np.ravel_multi_index(rows.T, grid), np.ravel_multi_index(among.T, grid))
    found = set(zip(*among.T.tolist()))
    return np.fromiter((key in found for key in zip(*rows.T.tolist())), dtype=bool, count=len(rows))
