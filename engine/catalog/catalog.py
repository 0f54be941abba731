"""The catalog of one database: tensor relations, views and ordinary tables, looked up by name."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Iterator, Optional, Union

import numpy as np

from trdb.catalog import external
from trdb.catalog.names import did_you_mean, fold
from trdb.catalog.optimizer_state import refuse_reserved
from trdb.errors import DataError, IntegrityError, ProgrammingError, StaleSnapshot
from trdb.kernels.sparse import count_nonzero, is_sparse
from trdb.storage import catalog_store, tile_store
from trdb.storage.buffer_pool import TensorTiles
from trdb.storage.catalog_format import ensure_schema, schema_exists
from trdb.storage.catalog_validation import DamagedTensor, meta_problem, name_problem
from trdb.storage.database import Database
from trdb.storage.external_reads import read_all
from trdb.storage.external_tensors import refuse_write
from trdb.storage.ordinary_tables import ordinary_tables, ordinary_views
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_runs import TileRuns, as_tile_runs
from trdb.storage.tile_store import TileIndex
from trdb.storage.tile_writer import WrittenTiles
from trdb.storage.whole_tensor import the_one_tile, whole_array


class Catalog:
    """One connection's mirror of the catalog tables, loaded within one snapshot of the database.

    `generation` is the database's commit count the mirror was loaded at: when another connection
    has committed since, `sync` reloads it. Tiles are shared through the database's buffer pool by
    (tile table, data version), so no connection computes from tiles another one has replaced.
    """

    def __init__(self, db: Database):
        self.db = db
        self.pool = db.file.pool
        self.version = 0  # advanced by every change: cached plans name the version they were made for
        self.definitions = 0  # advanced by every change but a write's new statistics (what binding reads)
        self.generation = -1
        ensure_schema(db)
        self.reload()

    def _changed(self) -> None:
        """A tensor, view or table was made, dropped or renamed, or the mirror reloaded."""
        self.version += 1
        self.definitions += 1

    def reload(self) -> None:
        """Load the mirror: inside the open transaction, else in a read transaction of its own."""
        self._changed()
        if self.db.in_transaction:
            self._load(self.db.file.generation)
            return
        generation = self.db.file.stable_generation()  # read before the snapshot: a later commit shows
        with self.db.statement(writes=False):
            self._load(generation)

    def _load(self, generation: int) -> None:
        present = schema_exists(self.db)  # a read-only database trdb never wrote has no catalog
        tensors, damaged = catalog_store.load_tensors(self.db) if present else ([], [])
        self._tensors = {fold(m.name): m for m in tensors}
        self._damaged: dict[str, DamagedTensor] = {fold(d.name): d for d in damaged}
        self._views = {fold(n): (n, q) for n, q in (catalog_store.load_views(self.db) if present else {}).items()}
        self._ordinary: Optional[dict[str, list[tuple[str, str]]]] = None
        self.generation = generation

    def sync(self) -> None:
        """Reload when another connection has committed since the mirror was loaded."""
        if self.generation != self.db.file.generation:
            self.reload()

    def committed(self) -> None:
        """This connection committed what the mirror holds, and nobody else could commit meanwhile."""
        self.generation = self.db.file.generation

    # ------------------------------------------------------------ lookups

    def tensor(self, name: str) -> Optional[TensorMeta]:
        """The tensor named so, None when there is none; a damaged one is a DataError naming it."""
        meta = self._tensors.get(fold(name))
        if meta is None and self._damaged and fold(name) in self._damaged:
            raise self._damaged[fold(name)].error()
        return meta

    def has_tensor(self, name: str) -> bool:
        """Whether a tensor of that name is in the catalog, damaged or not."""
        return fold(name) in self._tensors or fold(name) in self._damaged

    def view(self, name: str) -> Optional[tuple[str, str]]:
        """(name as created, query text) of a view."""
        return self._views.get(fold(name))

    def ordinary_table(self, name: str) -> Optional[tuple[str, list[tuple[str, str]]]]:
        """(name, [(column, DuckDB type)]) of a plain SQL table or view."""
        tables = self.ordinary_tables()
        for table, columns in tables.items():
            if fold(table) == fold(name):
                return table, columns
        return None

    def ordinary_tables(self) -> dict[str, list[tuple[str, str]]]:
        if self._ordinary is None:
            self._ordinary = ordinary_tables(self.db)
        return self._ordinary

    def forget_ordinary_tables(self) -> None:
        """Plain SQL may have changed the ordinary tables; look them up again when next needed."""
        self._changed()
        self._ordinary = None

    def tensors(self) -> list[TensorMeta]:
        return sorted(self._tensors.values(), key=lambda m: fold(m.name))

    def views(self) -> list[tuple[str, str]]:
        return sorted(self._views.values(), key=lambda v: fold(v[0]))

    def relation_names(self) -> list[str]:
        names = [m.name for m in self._tensors.values()] + [v[0] for v in self._views.values()]
        return names + list(self.ordinary_tables())

    def kind_of(self, name: str) -> Optional[str]:
        """What a name is: 'tensor', 'view' (trdb's or DuckDB's), 'table', or None when nothing has it."""
        if self.has_tensor(name):
            return "tensor"
        if self.view(name) is not None:
            return "view"
        table = self.ordinary_table(name)
        if table is None:
            return None
        return "view" if table[0] in ordinary_views(self.db) else "table"

    def require_tensor(self, name: str) -> TensorMeta:
        meta = self.tensor(name)
        if meta is None:
            other = self.kind_of(name)
            if other is not None:  # INSERT INTO a view, MINIMIZE ... WRT (a table): say what it is
                raise ProgrammingError(f'"{name}" is a {other}, not a tensor')
            raise ProgrammingError(f'tensor "{name}" does not exist',
                                   hint=did_you_mean(name, [m.name for m in self._tensors.values()]))
        return meta

    def check_new_name(self, name: str) -> None:
        if self.tensor(name) or self.view(name) or self.ordinary_table(name):
            raise IntegrityError(f'a relation named "{name}" already exists')

    # ------------------------------------------------------------ changes

    def create_tensor(self, meta: TensorMeta, internal: bool = False) -> TensorMeta:
        """A new, empty tensor; `internal`: trdb's own (optimizer state), whose names users cannot take."""
        self._changed()
        if not internal:
            refuse_reserved(meta.name)
        self.check_new_name(meta.name)
        _check_entering(meta)
        table = catalog_store.new_tile_table_name(self.db)
        meta = TensorMeta(meta.name, meta.keys, meta.value_name, meta.dtype, meta.shape, meta.tile, table,
                          version=catalog_store.new_data_version(self.db))
        tile_store.create_tile_table(self.db, table, len(meta.keys))
        catalog_store.save_tensor(self.db, meta)
        self._tensors[fold(meta.name)] = meta
        return meta

    def create_external_tensor(self, meta: TensorMeta, location: str) -> TensorMeta:
        """Register a tensor whose tiles are the Parquet dataset at `location` (checked and counted now)."""
        self._changed()
        refuse_reserved(meta.name)
        self.check_new_name(meta.name)
        _check_entering(meta)
        meta = external.registered(self.db, meta, location)
        meta = meta.with_version(catalog_store.new_data_version(self.db))
        catalog_store.save_tensor(self.db, meta)
        self._tensors[fold(meta.name)] = meta
        return meta

    def drop_tensor(self, name: str) -> None:
        self._changed()
        damaged = self._damaged.pop(fold(name), None)
        if damaged is not None:  # dropping is how a damaged tensor is removed
            if damaged.table is not None:
                tile_store.drop_tile_table(self.db, damaged.table)
            catalog_store.delete_tensor(self.db, damaged.name)
            return
        meta = self.require_tensor(name)
        tile_store.drop_tile_table(self.db, meta.table)
        catalog_store.delete_tensor(self.db, meta.name)
        self.pool.invalidate(meta.table)
        del self._tensors[fold(name)]

    def rename_tensor(self, name: str, new_name: str, internal: bool = False) -> TensorMeta:
        """Give a tensor a new name; its tiles stay in their table (tile tables are numbered, not named)."""
        self._changed()
        if not internal:
            refuse_reserved(new_name)
        meta = self.require_tensor(name)
        if fold(new_name) != fold(name):
            self.check_new_name(new_name)
        renamed = replace(meta, name=new_name)
        _check_entering(renamed)
        catalog_store.delete_tensor(self.db, meta.name)
        catalog_store.save_tensor(self.db, renamed)
        del self._tensors[fold(name)]
        self._tensors[fold(new_name)] = renamed
        return renamed

    def rename_view(self, name: str, new_name: str) -> None:
        self._changed()
        old, query = self.view(name)
        _check_view_name(new_name)
        if fold(new_name) != fold(name):
            self.check_new_name(new_name)
        catalog_store.delete_view(self.db, old)
        catalog_store.save_view(self.db, new_name, query)
        del self._views[fold(name)]
        self._views[fold(new_name)] = (new_name, query)

    def refresh_statistics(self, meta: TensorMeta, known: Optional[tuple] = None) -> TensorMeta:
        """Recount tuples and non-zeros after a write (`known`: the writer counted them, having written
        the whole tensor); the tiles get a new data version."""
        refuse_write(meta)  # before the recount: an external tensor's tiles are not in the database
        counted = known if known is not None else tile_store.tile_statistics(self.db, meta)
        return self.refresh_statistics_of([(meta, counted)])[0]

    def refresh_statistics_of(self, written: list[tuple[TensorMeta, tuple]]) -> list[TensorMeta]:
        """Several tensors' statistics, counted by their writers, saved in one statement; each gets a new data
        version."""
        for meta, _ in written:
            refuse_write(meta)
        self.version += 1
        counted = [meta.with_stats(*known) for meta, known in written]
        stored = all(new == self._tensors.get(fold(new.name)) for new in counted)  # the statistics it has
        metas = catalog_store.save_statistics_of(self.db, counted, stored)
        for meta in metas:
            self._tensors[fold(meta.name)] = meta
            self.pool.invalidate(meta.table)
        return metas

    def create_view(self, name: str, query: str, or_replace: bool) -> None:
        self._changed()
        _check_view_name(name)
        if self.view(name) and or_replace:
            catalog_store.delete_view(self.db, self.view(name)[0])
        else:
            self.check_new_name(name)
        catalog_store.save_view(self.db, name, query)
        self._views[fold(name)] = (name, query)

    def drop_view(self, name: str) -> None:
        self._changed()
        view = self.view(name)
        if view is None:
            raise ProgrammingError(f'view "{name}" does not exist',
                                   hint=did_you_mean(name, [v[0] for v in self._views.values()]))
        catalog_store.delete_view(self.db, view[0])
        del self._views[fold(name)]

    # ------------------------------------------------------------ tiles

    def tiles(self, meta: TensorMeta) -> TensorTiles:
        """All tiles of a tensor (dense arrays or CSR tiles), through the buffer pool."""
        if meta.external:
            key, dataset = external.whole_key(self.db, meta)
            return self.pool.get(key, lambda: read_all(dataset, meta))
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
            views = list(stack) if stack.ndim > 1 else [stack[i, ...] for i in range(len(stack))]
            self.pool.put((meta.table, meta.version), (keys, TileRuns(views, ((0, stack),) if len(stack) else ())))
            return
        keys, tiles = tile_store.sorted_by_key(keys, tiles)
        tiles = as_tile_runs(tiles)  # a scan hands the runs of small tiles on as column batches
        for tile in tiles:
            if not is_sparse(tile):  # CSR tiles come from a read (kept_tiles): as it made them
                tile.flags.writeable = False
        self.pool.put((meta.table, meta.version), (keys, tiles))

    def kept_tiles(self, meta: TensorMeta) -> Optional[TensorTiles]:
        """The tiles of the version of a stored tensor this connection sees, if the buffer pool keeps
        them (nothing is read: None otherwise)."""
        return None if meta.external else self.pool.peek((meta.table, self._seen_version(meta)))

    def keep_updated(self, meta: TensorMeta, before: TensorTiles, written: WrittenTiles) -> None:
        """An UPDATE replaced the tiles under `written`'s keys (what its writer inserted, tiles of the tensor's
        dtype) in the contents `before` (from `kept_tiles`), giving `meta` (its new version): the buffer pool
        keeps the new contents, so that the next scan reads no tile back. Unless a new tile is stored CSR, or
        came CSR and is stored dense (a read gives another array than the one written): then the next scan
        reads the tensor again."""
        if not written.all_dense:
            return
        old_keys, old_tiles = before
        width = len(meta.keys)
        new_keys = np.concatenate([keys for keys, _ in written.batches] + [np.zeros((0, width), np.int64)])
        left = np.flatnonzero(~_rows_in(old_keys, new_keys, meta.grid)) if len(old_keys) else np.zeros(0, np.int64)
        stacks = [tiles for _, tiles in written.batches]
        if not len(left) and stacks and all(isinstance(t, np.ndarray) for t in stacks) and \
                len({(t.shape[1:], t.dtype) for t in stacks}) == 1:
            self.keep_written(meta, new_keys, np.concatenate(stacks))  # every tile replaced, all of one shape
            return
        tiles: list = []
        for stack in stacks:
            tiles.extend(stack if isinstance(stack, list) else
                         list(stack) if stack.ndim > 1 else [stack[i, ...] for i in range(len(stack))])
        # a view (of a write batch's stack, whose tiles all go in) is kept as it is: the runs are stacked again
        tiles = [tile if tile.flags.c_contiguous else np.array(tile, order="C") for tile in tiles]
        keys = np.concatenate([new_keys, old_keys[left]])
        self.keep_written(meta, keys, tiles + [old_tiles[i] for i in left.tolist()])

    def external_reads(self, meta: TensorMeta, partition: int = 0, partitions: int = 1,
                       columns: tuple[int, ...] = (), read_bytes: int = 16 << 20) -> Iterator[TensorTiles]:
        """An external tensor's tiles of one partition, in reads of about `read_bytes` (location checked now)."""
        return external.partition_reads(self.db, meta, partition, partitions, columns, read_bytes)

    def _read_tiles(self, meta: TensorMeta) -> TensorTiles:
        keys, tiles = tile_store.read_tiles(self.db, meta)
        self._check_snapshot()
        _check_keys(meta, keys)
        return keys, tiles

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


def _check_entering(meta: TensorMeta) -> None:
    """A tensor enters the catalog only as the loader will read it back (catalog_validation's rules), so that
    nothing a statement commits is damaged when the database is opened again."""
    problem = meta_problem(meta)
    if problem:
        raise ProgrammingError(f"cannot store tensor {meta.name!r}: {problem}",
                               hint=_NAME_HINT if "name" in problem else None)


def _check_view_name(name: str) -> None:
    problem = name_problem(name, "view name")
    if problem:
        raise ProgrammingError(problem, hint=_NAME_HINT)


_NAME_HINT = 'a name may be any text in double quotes ("my name") but an empty one or one holding a NUL character'


def _check_keys(meta: TensorMeta, keys: np.ndarray) -> None:
    """Stored keys are unique and inside the tile grid (a tampered file may hold anything)."""
    if len(keys) == 0 or keys.shape[1] == 0:
        if len(keys) > 1:
            raise DataError(f'tensor "{meta.name}" has {len(keys)} tuples under its one (empty) key')
        return
    grid = np.asarray(meta.grid, dtype=np.int64)
    outside = np.flatnonzero(((keys < 0) | (keys >= grid)).any(axis=1))
    if len(outside):
        raise DataError(f'tensor "{meta.name}" has a tile at key {tuple(keys[outside[0]].tolist())}, '
                        f"outside its tile grid {tuple(grid.tolist())}")
    repeated = np.flatnonzero((keys[1:] == keys[:-1]).all(axis=1))  # read sorted by key
    if len(repeated):
        raise DataError(f'tensor "{meta.name}" has more than one tile at key {tuple(keys[repeated[0]].tolist())}')


def _rows_in(rows: np.ndarray, among: np.ndarray, grid: tuple[int, ...]) -> np.ndarray:
    """Which key rows (n x m, in the grid) are among the rows of `among`."""
    if rows.shape[1] == 0:
        return np.full(len(rows), len(among) > 0)
    if math.prod(grid) < 2 ** 62:  # each key row as its one position in the grid
        return np.isin(np.ravel_multi_index(rows.T, grid), np.ravel_multi_index(among.T, grid))
    found = set(zip(*among.T.tolist()))
    return np.fromiter((key in found for key in zip(*rows.T.tolist())), dtype=bool, count=len(rows))
