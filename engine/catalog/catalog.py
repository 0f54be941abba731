"""The catalog of one database: tensor relations, views and ordinary tables, looked up by name."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from trdb.catalog import external
from trdb.catalog.names import did_you_mean, fold
from trdb.catalog.optimizer_state import refuse_reserved
from trdb.catalog.tile_access import TileAccess
from trdb.errors import IntegrityError, ProgrammingError
from trdb.storage import catalog_store, small_tiles, tile_parts, tile_store
from trdb.storage.catalog_format import ensure_schema, schema_exists
from trdb.storage.catalog_validation import DamagedTensor, meta_problem, name_problem
from trdb.storage.database import Database
from trdb.storage.external_tensors import refuse_write
from trdb.storage.ordinary_tables import ordinary_tables, ordinary_views
from trdb.storage.tensor_meta import TensorMeta


class Catalog(TileAccess):
    """One connection's mirror of the catalog tables, loaded within one snapshot of the database.

    `generation` is the database's commit count the mirror was loaded at: when another connection
    has committed since, `sync` reloads it. Reading and keeping tiles is its base's (TileAccess).
    """

    def __init__(self, db: Database):
        self.db = db
        self.pool = db.file.pool
        self.version = 0  # advanced by every change: cached plans name the version they were made for
        self.definitions = 0  # advanced by every change but a write's new statistics (what binding reads)
        self.generation = -1
        self._adam_steps: tuple[int, dict[str, int]] = (-1, {})  # (version, counts): remember_adam_steps
        self._unread_writes: dict[str, int] = {}  # tile table -> writes kept with no read between (kept_for_write)
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

    def remember_adam_steps(self, steps: dict[str, int]) -> None:
        """Adam's step counts this connection just wrote: a later MINIMIZE of those parameters takes them from
        here, not from the database, while the catalog is as it was (every write, DDL, rollback and other
        connection's commit advances `version`)."""
        self._adam_steps = (self.version, {fold(name): step for name, step in steps.items()})

    def remembered_adam_steps(self, names: list[str]) -> Optional[dict[str, int]]:
        """The step counts of `names` as `remember_adam_steps` kept them; None where it kept none of some."""
        version, steps = self._adam_steps
        if version != self.version or not all(fold(name) in steps for name in names):
            return None
        return {name: steps[fold(name)] for name in names}

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
        small = small_tiles.qualifies(meta) and small_tiles.has_room(self.db, tile_parts.part_bytes(self.db))
        table = catalog_store.new_tile_table_name(self.db, small)
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
        catalog_store.rename_tensor(self.db, meta.name, renamed)
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

    def refresh_statistics_of(self, written: list[tuple[TensorMeta, tuple]],
                              adam_steps: Optional[dict[str, int]] = None) -> list[TensorMeta]:
        """Several tensors' statistics, counted by their writers, saved in one statement; each gets a new data
        version. `adam_steps`: step counts of parameters among them, set by the same statement."""
        for meta, _ in written:
            refuse_write(meta)
        self.version += 1
        counted = [meta.with_stats(*known) for meta, known in written]
        changed = [new != self._tensors.get(fold(new.name)) for new in counted]  # not the statistics it has
        metas = catalog_store.save_statistics_of(self.db, counted, changed, adam_steps)
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
