"""CREATE TENSOR (SHAPE/FILL, FROM array or .npy, AS query; OR REPLACE, IF NOT EXISTS), CREATE VIEW, DROP."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from trdb.errors import Error, ProgrammingError
from trdb.execution.result import Result
from trdb.ingest.array_inputs import array_from_param, is_sparse_matrix
from trdb.ingest.coo_tiles import entry_tile_counts, sparse_matrix_entries, write_entries
from trdb.ingest.fill import fill_maker
from trdb.ingest.npy_files import check_storable, load_npy
from trdb.ingest.tiling import write_array, write_generated
from trdb.ingest.value_fit import check_sparse
from trdb.optimizer.tile_choice import TILE_ELEMENTS, default_tile
from trdb.parser import ast
from trdb.pipeline.limits import check_stored, check_tile
from trdb.statements.adam_moments import drop_optimizer_state, rename_optimizer_state
from trdb.statements.context import StatementContext
from trdb.statements.file_tensors import create_tensor_from_table_file, file_format
from trdb.statements.materialize import store_rows
from trdb.statements.names import does_not_exist, require_kind, wrong_kind
from trdb.storage.tensor_meta import TensorMeta, clamp_tile, parse_dtype, validate_layout

CreateHandler = Callable[[StatementContext, Any], Result]


def creating(handler: CreateHandler) -> CreateHandler:
    """A CREATE TENSOR handler with OR REPLACE and IF NOT EXISTS: a name already taken is skipped (IF NOT
    EXISTS, as PostgreSQL's notice says), or its tensor replaced in the statement's transaction (OR REPLACE;
    the AS form drops it only after its query has read it)."""
    def create(sc: StatementContext, node) -> Result:
        kind = sc.catalog.kind_of(node.name)
        if kind is not None and node.if_not_exists:
            return Result(rowcount=0, status=f'CREATE TENSOR: {kind} "{node.name}" already exists, skipped')
        if kind not in (None, "tensor") and node.or_replace:
            raise wrong_kind("DROP", "tensor", node.name, kind)  # replacing a view or table would be a surprise
        if kind == "tensor" and node.or_replace and not isinstance(node, ast.CreateTensorAs):
            drop_tensor(sc, node.name)
        return handler(sc, node)
    return create


def drop_tensor(sc: StatementContext, name: str) -> None:
    """Drop a tensor and its optimizer state: Adam's moments and step count go with their parameter."""
    sc.catalog.drop_tensor(name)
    drop_optimizer_state(sc, name)


def create_tensor(sc: StatementContext, node: ast.CreateTensor) -> Result:
    if any(n == 0 for n in node.shape):
        raise ProgrammingError(f"SHAPE {tuple(node.shape)}: sizes must be positive (a tensor has at least "
                               f"one element)")
    tile = clamp_tile(node.shape, node.tile)
    keys = validate_layout(node.shape, tile, node.keys)
    meta = TensorMeta(node.name, keys, "v", parse_dtype(node.dtype), tuple(node.shape), tile, "")
    if node.location is not None:
        check_tile(sc.settings, meta)
        sc.catalog.create_external_tensor(meta, node.location)
        return Result(rowcount=0)
    # no FILL: an empty tensor, every tile absent (sparse, for INSERT to fill); any FILL, ZEROS too, is dense
    maker = None if node.fill is None else _fill_maker(sc, meta, node.fill)
    check_stored(sc.settings, meta, sc.db.room()) if maker is not None else check_tile(sc.settings, meta)
    meta = sc.catalog.create_tensor(meta)
    written = write_generated(sc.db, meta, maker, sc.interrupted) if maker is not None else None
    sc.catalog.refresh_statistics(meta, written.as_tuple() if written is not None else None)
    return Result(rowcount=0)


def _fill_maker(sc: StatementContext, meta: TensorMeta, fill: ast.Fill):
    """FILL's tile maker; an argument it refuses gets the caret (else the FILL clause does)."""
    try:
        return fill_maker(meta, fill.kind, [sc.constant(a) for a in fill.args], sc.interrupted)
    except Error as exc:
        position = getattr(exc, "fill_argument", None)
        where = fill.args[position].span if position is not None and position < len(fill.args) else fill.span
        raise exc.at(sc.text, where.line or None, where.column or None) from None


def _chosen_tile(sc: StatementContext, array, dtype: np.dtype) -> tuple[int, ...]:
    """The tile of an array given without TILE: a sparse matrix keeps the small tile, so that its empty
    regions stay absent tiles; a dense one gets tiles sized for the session's workers and memory budget."""
    if is_sparse_matrix(array):
        return default_tile(array.shape, elements=TILE_ELEMENTS)
    return default_tile(array.shape, sc.settings.workers, budget=sc.db.file.memory.budget, itemsize=dtype.itemsize)


def create_tensor_from(sc: StatementContext, node: ast.CreateTensorFrom) -> Result:
    kind = file_format(sc.db, node.source) if isinstance(node.source, str) else None
    if kind is not None:  # a Parquet or CSV file COPY ... TO wrote
        return create_tensor_from_table_file(sc, node, kind)
    if isinstance(node.source, ast.Param):
        array = array_from_param(sc.param(node.source))
        check_storable(array.dtype, "the array given for ?", "pass np.real(a) or np.abs(a) instead")
    else:
        array = load_npy(node.source, sc.db)
    dtype = parse_dtype(node.dtype) if node.dtype else (
        parse_dtype(array.dtype.name) if array.dtype.name in ("float32", "float64", "int32", "int64", "bool",
                                                               "float16") else parse_dtype(None))
    tile = clamp_tile(array.shape, node.tile if node.tile is not None else _chosen_tile(sc, array, np.dtype(dtype)))
    keys = validate_layout(array.shape, tile, node.keys)
    meta = TensorMeta(node.name, keys, "v", np.dtype(dtype), tuple(array.shape), tile, "")
    if not is_sparse_matrix(array):
        check_stored(sc.settings, meta, sc.db.room())
        meta = sc.catalog.create_tensor(meta)
        known = write_array(sc.db, meta, array, sc.interrupted).as_tuple()  # the new tensor's statistics
    else:  # judged by the non-zeros of its tiles, not its dense size
        check_sparse(array, meta.dtype, meta.name)
        entries = sparse_matrix_entries(meta, array)
        check_stored(sc.settings, meta, sc.db.room(), entry_tile_counts(meta, entries))
        meta = sc.catalog.create_tensor(meta)
        write_entries(sc.db, meta, entries)
        known = None
    sc.catalog.refresh_statistics(meta, known)
    return Result(rowcount=0)


def create_tensor_as(sc: StatementContext, node: ast.CreateTensorAs) -> Result:
    # before OR REPLACE drops the tensor (the query may read it); every tuple the query gives is kept, an
    # all-zero one too (zeros are values), so no rule may drop a tuple because its tile comes out zero
    result = sc.run_query(node.query, keep_zero_tuples=True)
    if node.or_replace and sc.catalog.has_tensor(node.name):
        drop_tensor(sc, node.name)
    store_rows(sc, node.name, node.keys, result)
    return Result(rowcount=0)


def create_view(sc: StatementContext, node: ast.CreateView) -> Result:
    kind = sc.catalog.kind_of(node.name)
    if kind is not None and node.if_not_exists:
        return Result(rowcount=0, status=f'CREATE VIEW: {kind} "{node.name}" already exists, skipped')
    if kind not in (None, "view") and node.or_replace:
        raise wrong_kind("DROP", "view", node.name, kind)
    sc.bind_query(node.query)  # a view must be valid when it is created
    sc.catalog.create_view(node.name, node.query_text, node.or_replace)
    return Result(rowcount=0)


def drop(sc: StatementContext, node: ast.Drop) -> Result:
    """DROP TENSOR / VIEW (DuckDB's views and tables go to DuckDB); the wrong kind names the right one."""
    kind = sc.catalog.kind_of(node.name)
    if kind is None and node.if_exists:
        return Result(rowcount=0, status=f'DROP {node.kind}: {node.kind.lower()} "{node.name}" does not exist, '
                                         "skipped")
    if node.kind == "TENSOR" and kind == "tensor":
        drop_tensor(sc, node.name)
    elif node.kind == "VIEW" and sc.catalog.view(node.name) is not None:
        sc.catalog.drop_view(node.name)
    elif kind is None:
        raise does_not_exist(sc.catalog, node.kind.lower(), node.name)
    else:
        raise wrong_kind("DROP", node.kind.lower(), node.name, kind)
    return Result(rowcount=0)


def alter_rename(sc: StatementContext, node: ast.AlterRename) -> Result:
    """ALTER TENSOR / VIEW name RENAME TO new: the catalog row only (tiles stay in their numbered table);
    a tensor's optimizer state follows it. Views that name it keep their text, as DuckDB's do."""
    rest = f" RENAME TO {node.new_name}"
    require_kind(sc.catalog, "ALTER", node.kind.lower(), node.name, rest)
    if node.kind == "VIEW":
        sc.catalog.rename_view(node.name, node.new_name)
        return Result(rowcount=0)
    meta = sc.catalog.rename_tensor(node.name, node.new_name)
    rename_optimizer_state(sc, node.name, meta.name)
    return Result(rowcount=0)


