"""Query results: rows plus column metadata, and assembling tiles (dense or CSR) back into one dense tensor."""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import numpy as np

from trdb.errors import DataError, InterfaceError, OperationalError
from trdb.execution.column_batch import ColumnBatch, is_columns
from trdb.execution.placed_columns import ColumnBatches, placed_columns
from trdb.execution.result_canvas import ResultCanvas
from trdb.execution.spool import RowSpool
from trdb.kernels.sparse import elements, is_sparse, scatter_into
from trdb.plan.types import Schema, TensorType


@dataclass
class Result:
    """What a statement returns: rows with a schema (tensor queries) or DuckDB's description."""

    rows: Union[list, RowSpool] = field(default_factory=list)  # a RowSpool when the rows spilled
    schema: Optional[Schema] = None
    description: Optional[list] = None
    rowcount: int = -1
    status: Optional[str] = None  # what a statement that changed something did ("UPDATE A: 12 tiles")
    spool: Optional[RowSpool] = field(default=None, repr=False, compare=False)  # holds the rows' memory
    canvas: Optional[ResultCanvas] = field(default=None, repr=False, compare=False)  # where tiles were placed

    @property
    def spilled(self) -> bool:
        return self.spool is not None and self.spool.spilled

    def close(self) -> None:
        """Forget the rows: their memory is given back and their spill file removed."""
        if self.spool is not None:
            self.spool.close()
            self.spool = None
        self.rows = []
        self.canvas = None


FETCH_FLOOR = 32 << 20  # an array this small is always assembled, however small memory_limit (tests spill with KBs)


def check_result_fits(what: str, result: Result, memory_limit: int) -> None:
    """Refuse at once (before reading it back) to assemble a spilled result whose tiles alone exceed memory_limit."""
    limit = max(memory_limit, FETCH_FLOOR)
    if result.spilled and result.spool.nbytes > limit:
        needed = result.spool.nbytes
        raise OperationalError(
            f"{what}: the result holds {needed} bytes of tiles ({_size(needed)}), more than memory_limit "
            f"({_size(memory_limit)}), so it cannot be assembled into one array",
            hint="fetchmany() reads it a few tiles at a time; CREATE TENSOR ... AS keeps it in the database; "
                 "or raise memory_limit")


@dataclass(frozen=True)
class TensorLayout:
    """How a result's tiles form one tensor: key positions, value position, nominal tile, shape."""

    key_positions: tuple[int, ...]
    value_position: int
    dtype: np.dtype
    tile: tuple[int, ...]
    shape: tuple[int, ...]


def layout_of(schema: Schema, rows: Sequence[tuple], shape: Optional[Sequence[int]] = None) -> TensorLayout:
    """The layout of a result: keys map in order to the tile's leading axes."""
    keys = tuple(i for i, c in enumerate(schema) if c.is_key)
    values = [i for i, c in enumerate(schema) if c.is_tensor]
    if not values:
        raise InterfaceError("the result has no tensor column to assemble")
    column_type: TensorType = schema[values[0]].type
    pad = max(0, len(keys) - len(column_type.tile))
    tile = (1,) * pad + tuple(column_type.tile)
    extent = (None,) * pad + tuple(column_type.extent)
    if shape is None:
        shape = _shape_from_data(rows, keys, values[0], tile, extent)
    elif len(shape) != len(tile):
        raise InterfaceError(f"shape {tuple(shape)} has rank {len(shape)}; the result has rank {len(tile)}")
    return TensorLayout(keys, values[0], column_type.dtype, tile, tuple(int(n) for n in shape))


def check_unique_keys(rows: Sequence[tuple], keys: tuple[int, ...]) -> None:
    """One tile per key: a result with two tuples under one key has no single tensor to assemble."""
    seen: set = set()
    for row in rows:
        key = tuple(row[k] for k in keys)
        if key in seen:
            count = sum(tuple(r[k] for k in keys) == key for r in rows)
            raise DataError(f"the result has {count} tuples under key {key}: it is not one tensor",
                            hint="did you forget SUM(...) with GROUP BY?")
        seen.add(key)


def _shape_from_data(rows, keys, value, tile, extent) -> tuple[int, ...]:
    shape = [e or 0 for e in extent]
    if is_columns(rows) and rows.is_tile[value] and len(rows):
        return _shape_from_columns(rows, keys, value, tile, shape)
    pad = len(tile) - np.ndim(rows[0][value]) if rows else 0
    for row in rows:
        tile_shape = (1,) * pad + np.shape(row[value])
        for axis in range(len(tile)):
            key = row[keys[axis]] if axis < len(keys) else 0
            if key is None or key < 0:
                raise DataError(f"key {key} of the result cannot be placed in a tensor")
            shape[axis] = max(shape[axis], key * tile[axis] + tile_shape[axis])
    return tuple(shape)


def _shape_from_columns(batch: ColumnBatch, keys, value, tile, shape: list) -> tuple[int, ...]:
    """`_shape_from_data` of a column batch: from each key column's largest value and the stack's tile shape."""
    stack = batch.columns[value]
    tile_shape = (1,) * (len(tile) - (stack.ndim - 1)) + stack.shape[1:]
    for axis in range(len(tile)):
        top = 0
        if axis < len(keys):
            column = batch.columns[keys[axis]]
            if int(column.min()) < 0:
                raise DataError(f"key {int(column.min())} of the result cannot be placed in a tensor")
            top = int(column.max())
        shape[axis] = max(shape[axis], top * tile[axis] + tile_shape[axis])
    return tuple(shape)


def tile_slices(layout: TensorLayout, row: tuple) -> tuple:
    """Where a row's tile goes in the assembled tensor."""
    shape = np.shape(row[layout.value_position])
    tile_shape = (1,) * (len(layout.tile) - len(shape)) + shape
    starts = [row[p] * layout.tile[a] for a, p in enumerate(layout.key_positions)]
    starts += [0] * (len(layout.tile) - len(starts))
    return tuple(slice(s, s + n) for s, n in zip(starts, tile_shape))


def check_fits(what: str, needed: int, shape: tuple, limits: Optional[dict] = None) -> None:
    """Refuse, before allocating, a fetched array of `needed` bytes above the least of `limits` (name: bytes)
    or above what a numpy array can hold."""
    name, top = min(((n, b) for n, b in (limits or {}).items() if b), key=lambda item: item[1],
                    default=("an array can hold", sys.maxsize))
    if needed > top or needed > sys.maxsize or any(n > sys.maxsize for n in shape):
        raise too_big(what, needed, shape, f"{name} ({_size(top)})")


def too_big(what: str, needed: int, shape: tuple, limit: str) -> OperationalError:
    """The error of a fetch whose array would need more than `limit` says."""
    return OperationalError(
        f"{what}: the result of shape {shape} would need {needed} bytes ({_size(needed)}), more than {limit}",
        hint="fetchall() returns it tile by tile" + ("" if "sparse" in what else "; fetch_sparse() holds "
             "only the non-zeros of a 2-d result") + f"; {what[:-1]}shape=...) assembles a smaller shape "
             "that holds the tiles")


def _size(count: int) -> str:
    for unit, scale in (("EiB", 1 << 60), ("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30),
                        ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count} bytes"


def assemble(schema: Schema, rows: Sequence[tuple], shape: Optional[Sequence[int]] = None,
             limits: Optional[dict] = None, canvas: Optional[ResultCanvas] = None) -> np.ndarray:
    """The whole result as one dense array; absent tiles are zeros. `limits`: the most bytes it may take;
    `canvas`: the array the rows' tiles may have been placed in (then it is the result, with no copy)."""
    if canvas is not None:
        # tiles placed in the canvas lie within the result's extent, one per key: no pass over the rows
        layout = layout_of(schema, (), shape)
        check_fits("fetch_tensor()", math.prod(layout.shape) * np.dtype(layout.dtype).itemsize, layout.shape, limits)
        placed = canvas.assembled(rows, layout.key_positions, layout.value_position, layout.shape)
        if placed is not None:
            return placed
    if isinstance(rows, ColumnBatches):
        placed = _placed_columns(schema, rows, shape, limits)
        if placed is not None:
            return placed
        rows = rows.rows()
    layout = layout_of(schema, rows, shape)
    check_unique_keys(rows, layout.key_positions)
    total = math.prod(layout.shape)
    check_fits("fetch_tensor()", total * np.dtype(layout.dtype).itemsize, layout.shape, limits)
    # when dense tiles cover the whole tensor exactly (the keys are unique), zero-filling it first is wasted work
    values = [row[layout.value_position] for row in rows]
    exact = not any(is_sparse(v) for v in values) and sum(elements(np.shape(v)) for v in values) == total
    out = _new_array(layout.shape, layout.dtype, exact)
    for row in rows:  # `or ...`: out[()] of a 0-d array is a scalar, out[...] a view of it
        _place(out[tile_slices(layout, row) or ...], row[layout.value_position], layout, row)
    return out


def _new_array(shape: tuple, dtype: np.dtype, exact: bool) -> np.ndarray:
    """The array a result is assembled in: empty where its tiles cover it (`exact`), else zeros."""
    try:
        return np.empty(shape, dtype=dtype) if exact else np.zeros(shape, dtype=dtype)
    except MemoryError:  # below the limits, yet more than this process may take now (RLIMIT_AS, other use)
        raise too_big("fetch_tensor()", math.prod(shape) * np.dtype(dtype).itemsize, shape,
                      "this process can allocate now") from None
    except ValueError as exc:  # a shape numpy cannot make even empty: (0, 2**62), no tuples along a huge axis
        raise OperationalError(f"fetch_tensor(): numpy cannot make an array of the result's shape {shape}: "
                               f"{exc}", hint="fetch_tensor(shape=...) assembles a smaller shape; fetch_sparse() "
                                              "takes any 2-d shape") from None


def _placed_columns(schema: Schema, batches: ColumnBatches, shape: Optional[Sequence[int]],
                    limits: Optional[dict]) -> Optional[np.ndarray]:
    """assemble() of column batches of full tiles, by their key arrays (execution/placed_columns.py); None where
    that does not apply."""
    layout = layout_of(schema, (), shape)  # without a shape: the result type's extent, which the tiles may pass
    itemsize = np.dtype(layout.dtype).itemsize

    def make(full: tuple, exact: bool) -> np.ndarray:
        check_fits("fetch_tensor()", math.prod(full) * itemsize, full, limits)
        return _new_array(full, layout.dtype, exact)
    return placed_columns(batches, layout.key_positions, layout.value_position, layout.tile,
                          shape if shape is not None else None, layout.shape, make)


def _place(target: np.ndarray, tile, layout: TensorLayout, row: tuple) -> None:
    """Copy a tile into its (zeroed, for CSR) place; CSR tiles write their stored values only."""
    shape = tuple(np.shape(tile))
    if target.size != elements(shape):
        raise DataError(f"the tile under key {tuple(row[p] for p in layout.key_positions)} has shape "
                        f"{shape}, which does not fit the tensor of shape {layout.shape}")
    if is_sparse(tile):
        scatter_into(target.reshape(shape), tile)
    else:
        target[...] = np.asarray(tile).reshape(target.shape)
