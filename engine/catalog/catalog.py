"""The catalog of one database: tensor relations, views and ordinary tables, looked up by name."""
from __future__ import annotations

from typing import Optional

from trdb.catalog.names import did_you_mean, fold
from trdb.catalog.tensor_meta import TensorMeta
from trdb.errors import IntegrityError, ProgrammingError
from trdb.storage import catalog_store, tile_store
from trdb.storage.buffer_pool import BufferPool, TensorTiles
from trdb.storage.database import Database


class Catalog:
    """In-memory mirror of the catalog tables; reloaded after a rollback."""

    def __init__(self, db: Database, pool: BufferPool):
        self.db = db
        self.pool = pool
        self.version = 0  # advanced by every change: cached plans name the version they were made for
        catalog_store.ensure_schema(db)
        self.reload()

    def reload(self) -> None:
        self.version += 1
        self._tensors = {fold(m.name): m for m in catalog_store.load_tensors(self.db)}
        self._views = {fold(n): (n, q) for n, q in catalog_store.load_views(self.db).items()}
        self._ordinary: Optional[dict[str, list[tuple[str, str]]]] = None
        self.pool.clear()

    # ------------------------------------------------------------ lookups

    def tensor(self, name: str) -> Optional[TensorMeta]:
        return self._tensors.get(fold(name))

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
            self._ordinary = catalog_store.ordinary_tables(self.db)
        return self._ordinary

    def forget_ordinary_tables(self) -> None:
        """Plain SQL may have changed the ordinary tables; look them up again when next needed."""
        self.version += 1
        self._ordinary = None

    def tensors(self) -> list[TensorMeta]:
        return sorted(self._tensors.values(), key=lambda m: fold(m.name))

    def views(self) -> list[tuple[str, str]]:
        return sorted(self._views.values(), key=lambda v: fold(v[0]))

    def relation_names(self) -> list[str]:
        names = [m.name for m in self._tensors.values()] + [v[0] for v in self._views.values()]
        return names + list(self.ordinary_tables())

    def require_tensor(self, name: str) -> TensorMeta:
        meta = self.tensor(name)
        if meta is None:
            raise ProgrammingError(f'tensor "{name}" does not exist',
                                   hint=did_you_mean(name, [m.name for m in self._tensors.values()]))
        return meta

    def check_new_name(self, name: str) -> None:
        if self.tensor(name) or self.view(name) or self.ordinary_table(name):
            raise IntegrityError(f'a relation named "{name}" already exists')

    # ------------------------------------------------------------ changes

    def create_tensor(self, meta: TensorMeta) -> TensorMeta:
        self.version += 1
        self.check_new_name(meta.name)
        table = catalog_store.new_tile_table_name(self.db)
        meta = TensorMeta(meta.name, meta.keys, meta.value_name, meta.dtype, meta.shape, meta.tile, table)
        tile_store.create_tile_table(self.db, table, len(meta.keys))
        catalog_store.save_tensor(self.db, meta)
        self._tensors[fold(meta.name)] = meta
        return meta

    def drop_tensor(self, name: str) -> None:
        self.version += 1
        meta = self.require_tensor(name)
        tile_store.drop_tile_table(self.db, meta.table)
        catalog_store.delete_tensor(self.db, meta.name)
        self.pool.invalidate(meta.table)
        del self._tensors[fold(name)]

    def refresh_statistics(self, meta: TensorMeta) -> TensorMeta:
        """Recount tuples and non-zeros after a write, and drop the tensor's cached tiles."""
        self.version += 1
        meta = meta.with_stats(*tile_store.tile_statistics(self.db, meta))
        catalog_store.save_tensor(self.db, meta)
        self._tensors[fold(meta.name)] = meta
        self.pool.invalidate(meta.table)
        return meta

    def create_view(self, name: str, query: str, or_replace: bool) -> None:
        self.version += 1
        if self.view(name) and or_replace:
            catalog_store.delete_view(self.db, self.view(name)[0])
        else:
            self.check_new_name(name)
        catalog_store.save_view(self.db, name, query)
        self._views[fold(name)] = (name, query)

    def drop_view(self, name: str) -> None:
        self.version += 1
        view = self.view(name)
        if view is None:
            raise ProgrammingError(f'view "{name}" does not exist',
                                   hint=did_you_mean(name, [v[0] for v in self._views.values()]))
        catalog_store.delete_view(self.db, view[0])
        del self._views[fold(name)]

    # ------------------------------------------------------------ tiles

    def tiles(self, meta: TensorMeta) -> TensorTiles:
        """All tiles of a tensor (dense arrays or CSR tiles), through the buffer pool."""
        return self.pool.get(meta.table, lambda: tile_store.read_tiles(self.db, meta))

    def tile_nonzeros(self, meta: TensorMeta):
        """Per stored tile: keys (n x m, sorted), non-zeros and format (storage.tile_codec DENSE/CSR32/CSR64)."""
        return tile_store.tile_nonzeros(self.db, meta)
