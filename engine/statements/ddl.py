"""CREATE TENSOR (SHAPE/FILL, FROM array or .npy, AS query), CREATE VIEW, DROP."""
from __future__ import annotations

import numpy as np

from trdb.errors import ProgrammingError
from trdb.execution.result import Result
from trdb.optimizer.tile_choice import default_tile
from trdb.parser import ast
from trdb.pipeline.limits import check_stored, check_tile
from trdb.statements.array_inputs import array_from_param, is_sparse_matrix
from trdb.statements.context import StatementContext
from trdb.statements.coo_tiles import write_sparse_matrix
from trdb.statements.fill import fill_maker
from trdb.statements.materialize import store_rows
from trdb.statements.minimize import drop_optimizer_state
from trdb.statements.npy_files import check_storable, load_npy
from trdb.statements.tiling import write_array, write_generated
from trdb.statements.value_fit import check_sparse
from trdb.storage.tensor_meta import TensorMeta, clamp_tile, parse_dtype, validate_layout


def create_tensor(sc: StatementContext, node: ast.CreateTensor) -> Result:
    if any(n == 0 for n in node.shape):
        raise ProgrammingError(f"SHAPE {tuple(node.shape)}: sizes must be positive (a tensor has at least "
                               f"one element)")
    tile = clamp_tile(node.shape, node.tile)
    keys = validate_layout(node.shape, tile, node.keys)
    meta = TensorMeta(node.name, keys, "v", parse_dtype(node.dtype), tuple(node.shape), tile, "")
    fill = node.fill or ast.Fill("ZEROS")
    args = [sc.constant(a) for a in fill.args]
    maker = fill_maker(meta, fill.kind, args)
    check_stored(sc.settings, meta, sc.db.free_disk()) if maker is not None else check_tile(sc.settings, meta)
    meta = sc.catalog.create_tensor(meta)
    if maker is not None:
        write_generated(sc.db, meta, maker, sc.interrupted)
    sc.catalog.refresh_statistics(meta)
    return Result(rowcount=0)


def create_tensor_from(sc: StatementContext, node: ast.CreateTensorFrom) -> Result:
    if isinstance(node.source, ast.Param):
        array = array_from_param(sc.param(node.source))
        check_storable(array.dtype, "the array given for ?", "pass np.real(a) or np.abs(a) instead")
    else:
        array = load_npy(node.source)
    dtype = parse_dtype(node.dtype) if node.dtype else (
        parse_dtype(array.dtype.name) if array.dtype.name in ("float32", "float64", "int32", "int64", "bool",
                                                               "float16") else parse_dtype(None))
    tile = clamp_tile(array.shape, node.tile if node.tile is not None else default_tile(array.shape))
    keys = validate_layout(array.shape, tile, node.keys)
    meta = TensorMeta(node.name, keys, "v", np.dtype(dtype), tuple(array.shape), tile, "")
    check_stored(sc.settings, meta, sc.db.free_disk())
    meta = sc.catalog.create_tensor(meta)
    if is_sparse_matrix(array):
        check_sparse(array, meta.dtype, meta.name)
        write_sparse_matrix(sc.db, meta, array)
    else:
        write_array(sc.db, meta, array, sc.interrupted)
    sc.catalog.refresh_statistics(meta)
    return Result(rowcount=0)


def create_tensor_as(sc: StatementContext, node: ast.CreateTensorAs) -> Result:
    result = sc.run_query(node.query)
    store_rows(sc, node.name, node.keys, result)
    return Result(rowcount=0)


def create_view(sc: StatementContext, node: ast.CreateView) -> Result:
    sc.bind_query(node.query)  # a view must be valid when it is created
    sc.catalog.create_view(node.name, node.query_text, node.or_replace)
    return Result(rowcount=0)


def drop(sc: StatementContext, node: ast.Drop) -> Result:
    if node.kind == "TENSOR":
        if not sc.catalog.has_tensor(node.name) and node.if_exists:
            return Result(rowcount=0)
        sc.catalog.drop_tensor(node.name)
        drop_optimizer_state(sc, node.name)  # Adam's moments and step count go with their parameter
    else:
        if sc.catalog.view(node.name) is None and node.if_exists:
            return Result(rowcount=0)
        sc.catalog.drop_view(node.name)
    return Result(rowcount=0)


