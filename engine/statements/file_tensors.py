"""CREATE TENSOR name FROM 'file' for the files COPY ... TO writes besides npy: a Parquet file of tiles is read
back with the shape and tile it records, a long-form Parquet file through FROM COO with them; a CSV file (or a
long-form file that records no shape) is refused with the FROM COO statement that reads it."""
from __future__ import annotations

import os

import numpy as np
import pyarrow.parquet as pq

from trdb.errors import DataError, OperationalError
from trdb.execution.result import Result
from trdb.ingest import copy_files
from trdb.ingest.tiling import write_array
from trdb.optimizer.tile_choice import TILE_ELEMENTS, default_tile
from trdb.parser import ast
from trdb.pipeline.limits import check_stored
from trdb.statements.context import StatementContext
from trdb.statements.coo import create_tensor_from_coo
from trdb.statements.copy import FORMATS, check_path, read_tiles_into
from trdb.storage import file_sandbox
from trdb.storage.database import Database
from trdb.storage.tensor_meta import DTYPES, TensorMeta, parse_dtype, validate_layout

_PARQUET_MAGIC = b"PAR1"


def file_format(db: Database, path: str) -> str | None:
    """'parquet' or 'csv' for a file that COPY may have written (by its name, or a Parquet file's first bytes);
    None for anything else (read as .npy)."""
    by_name = FORMATS.get(os.path.splitext(path)[1].lower())
    if by_name in ("parquet", "csv"):
        return by_name
    try:
        with open(file_sandbox.checked(db, path), "rb") as file:  # opened only where the settings allow
            return "parquet" if file.read(4) == _PARQUET_MAGIC else None
    except (OSError, OperationalError):
        return None  # the .npy reader says what is wrong with it


def create_tensor_from_table_file(sc: StatementContext, node: ast.CreateTensorFrom, kind: str) -> Result:
    path = check_path(sc, node, node.source, writing=False)
    with copy_files.file_errors(path, kind, writing=False):
        if kind == "parquet" and copy_files.is_tile_form(path):
            return _from_tiles(sc, node, path)
        layout = copy_files.recorded_layout(path) if kind == "parquet" else None
        if layout is None or not path.lower().endswith((".parquet", ".parq", ".pq")):
            raise _use_coo(sc, node, path, kind)
        return _from_long(sc, node, path, layout)


def _from_tiles(sc: StatementContext, node: ast.CreateTensorFrom, path: str) -> Result:
    form = copy_files.tile_form(path)
    if node.tile is not None and tuple(node.tile) != form.tile:
        raise sc.bind.fail(node, f"'{node.source}' holds tiles of {form.tile}, not the TILE {tuple(node.tile)} given",
                           hint=f"leave TILE out to load its tiles as they are; RETILE({node.name}, {tuple(node.tile)}) "
                                "in a query cuts them anew")
    shape = form.shape if form.shape is not None else copy_files.tile_extent(path, form)
    keys = validate_layout(shape, form.tile, node.keys if node.keys is not None else form.key_names)
    dtype = parse_dtype(node.dtype) if node.dtype else _stored_dtype(form.dtype)
    meta = TensorMeta(node.name, keys, "v", dtype, tuple(shape), form.tile, "")
    check_stored(sc.settings, meta, sc.db.room())
    meta = sc.catalog.create_tensor(meta)
    read_tiles_into(sc, meta, path, (form.key_names, form.value_name), f"CREATE TENSOR {node.name} FROM '{path}'")
    sc.catalog.refresh_statistics(meta)
    return Result(rowcount=0)


def _stored_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(dtype) if np.dtype(dtype).name in DTYPES else parse_dtype(None)


def _from_long(sc: StatementContext, node: ast.CreateTensorFrom, path: str, layout: dict) -> Result:
    schema = pq.read_schema(path)
    shape, tile = tuple(layout["shape"]), tuple(node.tile or layout["tile"])
    if len(schema) != len(shape) + 1:
        raise _use_coo(sc, node, path, "parquet")
    dtype = node.dtype or _stored_dtype(np.dtype(schema.field(len(shape)).type.to_pandas_dtype())).name
    if not shape:
        return _from_scalar(sc, node, path, parse_dtype(dtype))
    coo = ast.CreateTensorFromCoo(node.name, node.keys, node.source, tuple(schema.names), shape, tile, dtype,
                                  span=node.span)
    return create_tensor_from_coo(sc, coo)


def _from_scalar(sc: StatementContext, node: ast.CreateTensorFrom, path: str, dtype: np.dtype) -> Result:
    """A 0-d tensor: one row of one value (tiles and long form are the same then)."""
    values = pq.read_table(path).column(0).to_numpy(zero_copy_only=False)
    if len(values) != 1:
        raise sc.bind.fail(node, f"'{node.source}' records a 0-d tensor but holds {len(values)} values",
                           error=DataError)
    meta = sc.catalog.create_tensor(TensorMeta(node.name, (), "v", dtype, (), (), ""))
    write_array(sc.db, meta, np.asarray(values[0]).reshape(()), sc.interrupted)
    sc.catalog.refresh_statistics(meta)
    return Result(rowcount=0)


def _use_coo(sc: StatementContext, node: ast.CreateTensorFrom, path: str, kind: str):
    """The error for a file of (index..., value) rows whose shape FROM cannot know: the FROM COO statement that
    reads it, with the shape its largest indices give and the tile trdb would choose."""
    columns = copy_files.long_columns(path, kind)
    names = ", ".join(columns)
    shape = copy_files.index_extent(path, kind, columns[:-1]) if len(columns) > 1 else None
    sizes = ", ".join(map(str, shape)) if shape else "n, ..."
    tile = ", ".join(map(str, default_tile(shape, elements=TILE_ELEMENTS))) if shape else "t, ..."
    quoted = node.source.replace("'", "''")
    what = "a CSV file" if kind == "csv" else "a Parquet file of (index..., value) rows that records no shape"
    return sc.bind.fail(node, f"'{node.source}' is {what}; FROM 'file' reads .npy arrays and the Parquet tiles "
                              "COPY ... TO writes",
                        hint=f"CREATE TENSOR {node.name} FROM COO '{quoted}' ({names}) SHAPE ({sizes}) "
                             f"TILE ({tile}) reads its rows (SHAPE from its largest indices)")
