"""INSERT, UPDATE and DELETE on tensor relations: each computed as a query, then applied to the tiles in batches."""
from __future__ import annotations

from typing import Optional

import numpy as np

from trdb.errors import IntegrityError, NotSupportedError, ProgrammingError, QueryCancelled
from trdb.execution.result import Result
from trdb.execution.spool import joined_batches, row_batches
from trdb.ingest.tiling import CHUNK_BYTES
from trdb.ingest.value_fit import cast_checked
from trdb.kernels.sparse import is_sparse
from trdb.kernels.sparse_input import checked_sparse
from trdb.parser import ast
from trdb.statements.context import StatementContext
from trdb.statements.materialize import check_tiles, write_result
from trdb.storage import small_tiles, tile_store
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_writer import TileWriter

DELETE_BATCH_KEYS = 1 << 16  # keys one DELETE removes at most (1 per 64 made 500,000 tiles take minutes)


def _write(sc: StatementContext, meta: TensorMeta, keys: np.ndarray, tiles: list, what: str) -> None:
    tiles = check_tiles(meta, keys, tiles, what)
    before = sc.catalog.kept_for_write(meta)  # where the buffer pool keeps the tensor, it keeps the new one too
    with TileWriter(sc.db, meta, CHUNK_BYTES, keep=before is not None) as writer:
        writer.add_all(keys, tiles)
    inserted = sc.catalog.refresh_statistics(meta)
    if before is not None:
        sc.catalog.keep_inserted(inserted, before, writer.kept)


def _reject_existing(sc: StatementContext, meta: TensorMeta, keys: np.ndarray) -> None:
    clashes = tile_store.existing_keys(sc.db, meta, keys) if len(keys) else []
    if clashes:
        raise IntegrityError(f"INSERT INTO {meta.name}: key {clashes[0]} already exists",
                             hint="use UPDATE to change a stored tile")


def insert_values(sc: StatementContext, node: ast.InsertValues) -> Result:
    meta = sc.catalog.require_tensor(node.table)
    width = len(meta.keys) + 1
    keys, tiles = [], []
    for row in node.rows:
        if len(row) != width:
            raise sc.bind.fail(row[0] if row else node, f"INSERT INTO {meta.name}: each row needs {width} values "
                                                        f"({', '.join(meta.keys + (meta.value_name,))}), got {len(row)}")
        values = [sc.constant(v) for v in row]
        if not all(isinstance(k, int) and not isinstance(k, bool) for k in values[:-1]):
            raise ProgrammingError(f"INSERT INTO {meta.name}: keys must be integers, got {values[:-1]}")
        keys.append(values[:-1])
        tiles.append(_tile_value(sc, meta, values[:-1], values[-1], row[-1]))
    key_array = np.array(keys, dtype=np.int64).reshape(len(keys), len(meta.keys))
    _reject_existing(sc, meta, key_array)
    _write(sc, meta, key_array, tiles, f"INSERT INTO {meta.name}")
    return Result(rowcount=len(keys))


def _tile_value(sc: StatementContext, meta: TensorMeta, key: list, value, node: ast.Expr):
    """A row's value as a tile: a numpy array (or list), a scipy.sparse matrix (kept CSR), or a number that
    fills the tile; check_tiles then checks its shape and dtype."""
    if is_sparse(value):
        return checked_sparse(value, f"the scipy.sparse matrix of key {tuple(key)}").tocsr()
    shown = None if value is not None else "NULL"
    if isinstance(value, (list, tuple)):
        try:
            value = np.asarray(value)
        except ValueError:
            shown = "a ragged list"
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return value
    if isinstance(value, (int, float)):  # a number fills the tile (a key outside the grid: check_tiles says so)
        scalar = cast_checked(np.asarray(value), meta.dtype, meta.name)
        return np.full(meta.tile_shape_at(key), scalar) if meta.key_in_range(key) else scalar
    shown = shown or (f"an array of {value.dtype}" if isinstance(value, np.ndarray) else f"a {type(value).__name__}")
    tile = meta.tile_shape_at(key) if meta.key_in_range(key) else meta.tile
    raise sc.bind.fail(node, f"INSERT INTO {meta.name}: the value of key {tuple(key)} is {shown}, not a tile",
                       hint=f"pass a numpy array of shape {tile}, a 2-d scipy.sparse matrix, or a number that "
                            "fills the tile")


def insert_query(sc: StatementContext, node: ast.InsertQuery) -> Result:
    meta = sc.catalog.require_tensor(node.table)
    result = sc.run_query(node.query, keep_zero_tuples=True)  # zeros are values: every tuple the query gives
    before = sc.catalog.kept_for_write(meta)  # where the buffer pool keeps the tensor, it keeps the new one too
    count, writer = write_result(sc, meta, result, f"INSERT INTO {meta.name}",
                                 lambda keys: _reject_existing(sc, meta, keys), keep=before is not None)
    if count == 0:  # no tile written: the tensor, its statistics and its data version stay as they were
        return Result(rowcount=0)
    inserted = sc.catalog.refresh_statistics(meta)
    if before is not None:
        sc.catalog.keep_inserted(inserted, before, writer.kept)
    return Result(rowcount=count)


def _target_select(meta: TensorMeta, alias: str, items: tuple, from_items: tuple, where) -> ast.Query:
    keys = tuple(ast.SelectItem(ast.ColumnRef(alias, k)) for k in meta.keys)
    select = ast.Select(keys + items, (ast.TableRef(meta.name, alias),) + tuple(from_items), where)
    return ast.Query(select)


def update_query(meta: TensorMeta, node: ast.Update) -> ast.Query:
    """The query an UPDATE runs: the target's keys and the new tiles (EXPLAIN shows its plan)."""
    value = ast.SelectItem(node.assignments[0].expr, meta.value_name)
    return _target_select(meta, node.alias or meta.name, (value,), node.from_items, node.where)


def update(sc: StatementContext, node: ast.Update) -> Result:
    meta = sc.catalog.require_tensor(node.table)
    if len(node.assignments) != 1 or node.assignments[0].column.lower() != meta.value_name.lower():
        names = ", ".join(a.column for a in node.assignments)
        raise sc.bind.fail(node.assignments[0], f"UPDATE {meta.name} SET {names}: only the tensor column "
                                                f"{meta.value_name} can be set", error=NotSupportedError,
                           hint="keys identify tiles; to move tiles, INSERT ... SELECT with new keys")
    # a computed zero tile replaces the stored one, an absent tuple leaves it: both must stay apart
    result = sc.run_query(update_query(meta, node), keep_zero_tuples=True)
    # each batch's old tiles are deleted before its new ones are held: DuckDB keeps only the deleted row ids
    # as undo data, and the new tiles are inserted batch by batch. An UPDATE of every tile (no WHERE, no
    # FROM: a tuple for each stored one) deletes them all at once instead: each DELETE reads the whole
    # tile table, and a batch's DELETE made the next insert measure the table's parts again
    # where the buffer pool keeps the tensor, it keeps the updated one too (the tiles written go in)
    # a small tensor's one tile is written over where it lies (small_tiles.py), nothing deleted
    before = sc.catalog.kept_for_write(meta)
    every_tile = node.where is None and not node.from_items and len(result.rows) == meta.tuple_count
    small = small_tiles.is_small(meta.table)
    if every_tile and not small:
        tile_store.delete_tiles(sc.db, meta)
    count, writer = write_result(sc, meta, result, f"UPDATE {meta.name}",
                                 None if every_tile or small else lambda keys: tile_store.delete_tiles(sc.db, meta, keys),
                                 keep=before is not None, overwrite=small)
    if count == 0:  # no tile written: the tensor, its statistics and its data version stay as they were
        return Result(rowcount=0)
    updated = sc.catalog.refresh_statistics(meta, _updated_statistics(sc, meta, writer, every_tile))
    if before is not None:
        sc.catalog.keep_updated(updated, before, writer.kept)
    return Result(rowcount=count)


def _updated_statistics(sc: StatementContext, meta: TensorMeta, writer, every_tile: bool) -> Optional[tuple]:
    """The statistics after an UPDATE, counted as little as can be: every tile written anew, the writer's (a
    query to count them took 1.3 ms of 5.8 for an UPDATE of one 64 x 64 tile); else the same keys as before
    (an UPDATE writes stored keys only) with their values' counts queried. None: count all of them (the catalog
    holds no distinct keys to keep)."""
    if every_tile:
        return writer.statistics.as_tuple()
    if meta.distinct_keys is None:
        return None
    return (meta.tuple_count, *tile_store.value_statistics(sc.db, meta), meta.distinct_keys)


def delete_query(meta: TensorMeta, node: ast.Delete) -> ast.Query:
    """The query a DELETE ... WHERE runs: the keys of the tuples to remove."""
    return _target_select(meta, node.alias or meta.name, (), (), node.where)


def delete(sc: StatementContext, node: ast.Delete) -> Result:
    meta = sc.catalog.require_tensor(node.table)
    if node.where is not None:
        return _delete_where(sc, meta, node)
    tile_store.delete_tiles(sc.db, meta)
    sc.catalog.refresh_statistics(meta)
    return Result(rowcount=meta.tuple_count)


def _delete_where(sc: StatementContext, meta: TensorMeta, node: ast.Delete) -> Result:
    result = sc.run_query(delete_query(meta, node))
    before = sc.catalog.kept_for_write(meta)  # where the buffer pool keeps the tensor, it keeps what is left
    deleted = []
    for batch in joined_batches(row_batches(result.rows), DELETE_BATCH_KEYS):  # a DELETE each: it reads the table
        key_array = np.array(batch, dtype=np.int64).reshape(len(batch), len(meta.keys))
        if sc.interrupted.is_set():
            raise QueryCancelled(f"the statement was cancelled while it deleted tiles of {meta.name}")
        tile_store.delete_tiles(sc.db, meta, key_array)
        deleted.append(key_array)
    if not deleted:  # no tile deleted: the tensor, its statistics and its data version stay as they were
        return Result(rowcount=0)
    left = sc.catalog.refresh_statistics(meta)
    if before is not None:
        sc.catalog.keep_deleted(left, before, np.concatenate(deleted))
    return Result(rowcount=sum(len(keys) for keys in deleted))

