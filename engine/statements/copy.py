"""COPY { tensor | (query) } TO 'path' and COPY tensor FROM 'path': results streamed to Parquet, CSV or npy."""
from __future__ import annotations

import math
import os
from typing import Iterable, Iterator, Optional

import numpy as np

from trdb.errors import DataError, IntegrityError, NotSupportedError, OperationalError, QueryCancelled
from trdb.execution.column_batch import is_columns
from trdb.execution.result import Result, TensorLayout
from trdb.execution.spool import row_batches
from trdb.ingest import copy_files
from trdb.ingest.npy_files import load_npy
from trdb.ingest.tiling import CHUNK_BYTES, write_array
from trdb.kernels.distinct import all_distinct
from trdb.parser import ast
from trdb.statements.context import StatementContext
from trdb.statements.coo import create_tensor_from_coo
from trdb.statements.copy_partitioned import check_folder, partition_count, write_dataset
from trdb.statements.materialize import check_tiles, result_columns, result_layout
from trdb.statements.written_keys import WrittenKeys
from trdb.storage import file_sandbox, tile_store
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_writer import TileWriter

FORMATS = {".parquet": "parquet", ".parq": "parquet", ".pq": "parquet", ".csv": "csv", ".tsv": "csv",
           ".npy": "npy"}
_OPTIONS = {"FORMAT": ("parquet", "csv", "npy"), "LAYOUT": ("tiles", "long")}


def copy_to(sc: StatementContext, node: ast.CopyTo) -> Result:
    given = dict(node.options)
    partitions = partition_count(sc, node, given["PARTITIONS"]) if "PARTITIONS" in given else None
    if partitions is None:
        path = check_path(sc, node, node.path, writing=True)
    else:
        path = check_folder(sc, node, node.path)
        if given.get("FORMAT", "parquet").lower() != "parquet" or given.get("LAYOUT", "tiles").lower() != "tiles":
            raise sc.bind.fail(node, "PARTITIONS writes a Parquet dataset of tiles",
                               hint="FORMAT parquet, LAYOUT tiles (the defaults with PARTITIONS)")
    file_format, layout_kind = _options(sc, node, path, partitions is not None)
    result = sc.run_query(_query_of(sc, node))
    try:
        count = write_result_file(result, path, file_format, layout_kind, partitions)
    finally:
        result.close()
    return _count(count)


def write_result_file(result: Result, path: str, file_format: str, layout_kind: str,
                      partitions: Optional[int] = None) -> int:
    """Write a tensor result batch by batch to a new file that replaces `path` only once complete (or to a
    hash-partitioned dataset, a directory, with `partitions`)."""
    result_columns(result, "COPY")
    layout = result_layout(result)  # a first pass over the batches: the extent of a query's result
    with copy_files.file_errors(path, file_format, writing=True):  # a full disk: an OperationalError that says so
        if partitions is not None:
            schema, batches = _tile_batches(result, layout)
            return write_dataset(path, schema, batches, [result.schema[p].name for p in layout.key_positions],
                                 partitions)
        temporary = copy_files.temporary_path(path)
        copy_files.remove_quietly(temporary)  # a link left there would be written through
        try:
            count = _write(result, layout, temporary, file_format, layout_kind)
            copy_files.replace_file(temporary, path)
        except BaseException:
            copy_files.remove_quietly(temporary)
            raise
    return count


def _write(result: Result, layout: TensorLayout, path: str, file_format: str, layout_kind: str) -> int:
    if file_format == "parquet" and layout_kind == "tiles":
        return copy_files.write_parquet(path, *_tile_batches(result, layout))
    schema, value = result.schema, result.schema[layout.value_position].name
    batches = _unique_keys(row_batches(result.rows), layout)
    if file_format == "npy":
        return copy_files.write_npy(path, layout, batches)
    arrow_schema, arrow_batches = copy_files.long_form_batches(layout, copy_files.index_names(schema, layout),
                                                               value, batches)
    writer = copy_files.write_csv if file_format == "csv" else copy_files.write_parquet
    return writer(path, arrow_schema, arrow_batches)


def _tile_batches(result: Result, layout: TensorLayout) -> tuple:
    """The Arrow schema of the result's tile form and its batches in that form."""
    schema, value = result.schema, result.schema[layout.value_position].name
    batches = _unique_keys(row_batches(result.rows), layout)
    keyed = len(layout.key_positions)
    ragged = any(n % t for n, t in zip(layout.shape[:keyed], layout.tile[:keyed]))
    arrow_schema = copy_files.tile_schema([schema[p].name for p in layout.key_positions], value, layout, ragged)
    return arrow_schema, (copy_files.tile_batch(layout, rows, arrow_schema) for rows in batches if rows)


def _unique_keys(batches: Iterable[list], layout: TensorLayout) -> Iterator[list]:
    """The batches, checked to hold one tile per key (a file holds one tensor): a column batch's keys by their
    places in the tile grid at once, other batches' tuple by tuple."""
    keys = layout.key_positions
    grid = tuple(-(-n // t) for n, t in zip(layout.shape[:len(keys)], layout.tile))
    seen = WrittenKeys(grid)
    for rows in batches:
        if is_columns(rows) and seen.marks and not any(rows.is_tile[k] for k in keys):
            arrays = [np.asarray(rows.columns[k], dtype=np.int64) for k in keys]
            if all(len(a) and a.min() >= 0 and a.max() < g for a, g in zip(arrays, grid)):
                places = np.ravel_multi_index(arrays, grid) if keys else np.zeros(len(rows), np.int64)
                if not seen.any_of(places) and all_distinct(places):
                    seen.mark(places)
                    yield rows
                    continue
        for row in rows:  # tuple by tuple: a repeated or misplaced key named
            key = tuple(row[k] for k in keys)
            place = _place(key, grid)
            if place is None or place in seen:
                what = f"the key {key}" if place is None else f"two tuples under key {key}"
                raise DataError(f"COPY: the result has {what}, so it is not one tensor",
                                hint="did you forget SUM(...) with GROUP BY, or COALESCE on an outer join's keys?")
            seen.add(place)
        yield rows


def _place(key: tuple, grid: tuple[int, ...]):
    """A key's place in the grid (WrittenKeys'), or None where a key is NULL, negative or past the grid."""
    if any(k is None or k < 0 or k >= g for k, g in zip(key, grid)):
        return None
    return int(np.ravel_multi_index(key, grid)) if key and math.prod(grid) < 1 << 62 else key


def _count(count: int) -> Result:
    """DuckDB's COPY result: one Count row."""
    return Result(rows=[(count,)], description=[("Count", "BIGINT", None, None, None, None, None)], rowcount=count)


def _query_of(sc: StatementContext, node: ast.CopyTo) -> ast.Query:
    if isinstance(node.source, ast.Query):
        return node.source
    if sc.catalog.tensor(node.source) is None and sc.catalog.view(node.source) is None:
        sc.catalog.require_tensor(node.source)  # the unknown-name error, with its suggestion
    select = ast.Select((ast.SelectItem(ast.Star(None)),), (ast.TableRef(node.source, None),), None)
    return ast.Query(select)


def _options(sc: StatementContext, node, path: str, partitioned: bool = False) -> tuple[str, str]:
    given = dict(node.options)
    for name, value in node.options:
        if name == "PARTITIONS" and isinstance(node, ast.CopyTo):
            continue
        allowed = _OPTIONS.get(name)
        if allowed is None:
            raise sc.bind.fail(node, f"COPY of a tensor has no option {name}",
                               hint="options: FORMAT parquet | csv | npy, LAYOUT tiles | long, PARTITIONS n")
        if (value or "").lower() not in allowed:
            raise sc.bind.fail(node, f"COPY option {name} takes {' | '.join(allowed)}, not {value!r}")
    extension = os.path.splitext(path)[1].lower()
    default = "parquet" if partitioned else FORMATS.get(extension, "csv")  # DuckDB's default is CSV
    file_format = (given.get("FORMAT") or default).lower()
    layout = (given.get("LAYOUT") or ("tiles" if file_format == "parquet" else "long")).lower()
    if file_format == "csv" and layout != "long":
        raise sc.bind.fail(node, "CSV holds a tensor in long form only", hint="LAYOUT long, or FORMAT parquet")
    if file_format == "npy" and "LAYOUT" in given:
        raise sc.bind.fail(node, "npy holds the whole dense array: it has no LAYOUT")
    return file_format, layout


def check_path(sc: StatementContext, node, path: str, writing: bool) -> str:
    """A local file path as DuckDB's COPY takes one, resolved (links followed); refused before anything is read or
    written."""
    if not path or "\x00" in path:
        raise sc.bind.fail(node, "COPY needs a file path" if not path else "a file path cannot hold a NUL character")
    if "://" in path:
        raise sc.bind.fail(node, f"COPY reads and writes local files, not '{path}'", error=NotSupportedError)
    try:
        path = file_sandbox.checked(sc.db, path)  # refused before anything is told about the file; opened resolved
    except OperationalError as exc:
        raise sc.bind.fail(node, exc.message, hint=exc.hint, error=OperationalError) from None
    if os.path.isdir(path):
        raise sc.bind.fail(node, f"cannot {'write' if writing else 'read'} '{path}': it is a directory",
                           error=OperationalError)
    folder = os.path.dirname(path)
    if writing and not os.path.isdir(folder):
        raise sc.bind.fail(node, f"cannot write '{path}': no such directory '{folder}'", error=OperationalError)
    if not writing and not os.path.isfile(path):
        raise sc.bind.fail(node, f"cannot read '{path}': no such file",
                           hint=f"paths are relative to {os.getcwd()}", error=OperationalError)
    return path


# ------------------------------------------------------------ COPY name FROM 'path'

def copy_from(sc: StatementContext, node: ast.CopyFrom) -> Result:
    meta = sc.catalog.require_tensor(node.name)
    path = check_path(sc, node, node.path, writing=False)
    file_format, layout_kind = _options(sc, node, path)
    with copy_files.file_errors(path, file_format, writing=False):  # a file that is not what its name says
        if file_format == "parquet" and "LAYOUT" not in dict(node.options):
            layout_kind = "tiles" if copy_files.is_tile_form(path) else "long"
        if file_format == "npy":
            count = _read_npy(sc, meta, path)
        elif layout_kind == "tiles":
            count = read_tiles_into(sc, meta, path)
        else:
            count = _read_long(sc, node, meta, path, file_format)
    sc.catalog.refresh_statistics(sc.catalog.require_tensor(node.name))
    return _count(count)


def read_tiles_into(sc: StatementContext, meta: TensorMeta, path: str, columns: Optional[tuple] = None,
                    what: Optional[str] = None) -> int:
    """Tiles of a tile-form Parquet file into `meta`, batch by batch; a key already stored is an IntegrityError.
    `columns`: the file's (key names, value name), where they are not the tensor's."""
    what, seen, count = what or f"COPY {meta.name} FROM '{path}'", set(), 0
    key_names, value_name = columns or (meta.keys, meta.value_name)
    path = file_sandbox.checked(sc.db, path)  # IMPORT's files come here unchecked
    with TileWriter(sc.db, meta, CHUNK_BYTES) as writer:
        for keys, tiles in copy_files.read_tile_batches(path, key_names, value_name):
            if sc.interrupted.is_set():
                raise QueryCancelled(f"the statement was cancelled while it read '{path}'")
            tiles = check_tiles(meta, keys, tiles, what, seen)
            clashes = tile_store.existing_keys(sc.db, meta, keys) if len(keys) else []
            if clashes:
                raise IntegrityError(f"{what}: key {clashes[0]} already exists",
                                     hint="COPY FROM adds tiles; DELETE FROM the tensor first to replace them")
            writer.add_all(keys, tiles)
            count += len(tiles)
    return count


def _require_empty(sc: StatementContext, meta: TensorMeta, path: str) -> None:
    if sc.catalog.refresh_statistics(meta).tuple_count:
        raise IntegrityError(f"COPY {meta.name} FROM '{path}': {meta.name} already holds tiles, and a whole "
                             "array (npy) or long-form entries replace every tile",
                             hint=f"DELETE FROM {meta.name} first")


def _read_npy(sc: StatementContext, meta: TensorMeta, path: str) -> int:
    _require_empty(sc, meta, path)
    array = load_npy(path, sc.db)
    if tuple(array.shape) != tuple(meta.shape):
        raise DataError(f"COPY {meta.name} FROM '{path}': the array has shape {tuple(array.shape)}, "
                        f"{meta.name} has shape {meta.shape}")
    return write_array(sc.db, meta, array, sc.interrupted).tuples


def _read_long(sc: StatementContext, node: ast.CopyFrom, meta: TensorMeta, path: str, file_format: str) -> int:
    """Long-form entries through FROM COO's loader (DuckDB sorts them into tiles), into the empty tensor."""
    _require_empty(sc, meta, path)
    columns = copy_files.long_columns(path, file_format)
    if len(columns) != len(meta.shape) + 1:
        raise DataError(f"COPY {meta.name} FROM '{path}': long form needs {len(meta.shape)} index columns and "
                        f"a value column, the file has {len(columns)} columns")
    sc.catalog.drop_tensor(meta.name)
    coo = ast.CreateTensorFromCoo(meta.name, meta.keys, path, tuple(columns), meta.shape, meta.tile,
                                  meta.dtype.name, node.span)
    create_tensor_from_coo(sc, coo)
    return int(sc.catalog.require_tensor(meta.name).tuple_count)

