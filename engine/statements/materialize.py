"""Storing query results as tiles: CREATE TENSOR ... AS, INSERT ... query, checked against the layout."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from trdb.errors import DataError, IntegrityError, ProgrammingError
from trdb.execution.result import Result, layout_of
from trdb.kernels.backend import to_host
from trdb.kernels.sparse import is_sparse
from trdb.statements.context import StatementContext
from trdb.storage import tile_store
from trdb.storage.tensor_meta import TensorMeta, validate_layout


def result_columns(result: Result, what: str) -> tuple[list[int], int]:
    """Key positions and the tensor position of a result that is to be stored."""
    keys = [i for i, c in enumerate(result.schema) if c.is_key]
    tensors = [i for i, c in enumerate(result.schema) if c.is_tensor]
    if len(tensors) != 1 or len(keys) + 1 != len(result.schema):
        kinds = ", ".join(f"{c.name} {c.type}" for c in result.schema)
        raise ProgrammingError(f"{what} needs a query giving key columns and one tensor column, got ({kinds})")
    return keys, tensors[0]


def check_tiles(meta: TensorMeta, keys: np.ndarray, tiles: Sequence, what: str) -> list:
    """Every key in range, unique, every tile (dense or CSR) of the shape the layout gives that key; tiles cast to dtype."""
    seen: set[tuple] = set()
    checked = []
    for key, tile in zip(map(tuple, keys.tolist()), tiles):
        if not meta.key_in_range(key):
            raise DataError(f"{what}: key {key} is outside the tile grid {meta.grid} of {meta.name}")
        if key in seen:
            raise IntegrityError(f"{what}: key {key} occurs more than once")
        seen.add(key)
        tile = tile if is_sparse(tile) else np.asarray(tile)
        expected = meta.tile_shape_at(key)
        if tile.shape != expected:
            raise DataError(f"{what}: the tile under key {key} has shape {tile.shape}, but {meta.name}'s "
                            f"layout (shape {meta.shape}, tile {meta.tile}) needs {expected}")
        if not np.can_cast(tile.dtype, meta.dtype, casting="same_kind"):
            raise DataError(f"{what}: a {tile.dtype} tile cannot be stored in {meta.name} ({meta.dtype})")
        checked.append(tile.astype(meta.dtype, copy=False))
    return checked


def rows_to_tiles(result: Result, what: str) -> tuple[np.ndarray, list]:
    """Keys (sorted, so that checks and errors do not depend on the order workers produced them) and host
    tiles: numpy arrays, CSR tiles kept CSR."""
    keys, value = result_columns(result, what)
    rows = [([row[k] for k in keys], row[value]) for row in result.rows]
    if any(k is None for key, _ in rows for k in key):
        raise DataError(f"{what}: a result key is NULL (from an outer join?); use COALESCE on keys")
    rows.sort(key=lambda r: r[0])
    key_array = np.array([key for key, _ in rows], dtype=np.int64).reshape(len(rows), len(keys))
    return key_array, [_host_tile(tile) for _, tile in rows]


def _host_tile(tile):
    tile = to_host(tile, keep_sparse=True)
    return tile if is_sparse(tile) else np.asarray(tile)


def store_rows(sc: StatementContext, name: str, key_names: Optional[Sequence[str]], result: Result) -> TensorMeta:
    """CREATE TENSOR name AS: a new tensor laid out as the result says (keys -> leading axes)."""
    keys, value = result_columns(result, "CREATE TENSOR ... AS")
    layout = layout_of(result.schema, result.rows)
    column = result.schema[value]
    if len(layout.tile) != len(column.type.tile):
        raise ProgrammingError(f"CREATE TENSOR ... AS: {len(keys)} key columns but the tiles are "
                               f"{len(column.type.tile)}-d; a tensor needs at least as many tile axes as keys")
    names = validate_layout(layout.shape, layout.tile, key_names or [result.schema[k].name for k in keys])
    if len(names) != len(keys):
        raise ProgrammingError(f"CREATE TENSOR {name} ({', '.join(names)}): the query gives {len(keys)} keys")
    meta = sc.catalog.create_tensor(TensorMeta(name, names, column.name, column.type.dtype, layout.shape,
                                               layout.tile, ""))
    key_array, tiles = rows_to_tiles(result, "CREATE TENSOR ... AS")
    tiles = check_tiles(meta, key_array, tiles, f"CREATE TENSOR {name} AS")
    tile_store.write_tiles(sc.db, meta, key_array, tiles)
    return sc.catalog.refresh_statistics(meta)
