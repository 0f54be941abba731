"""Elementwise projections of many small tiles at once: a batch's tiles of one shape stacked, each kernel called once.

A tuple's kernel call costs microseconds of Python whatever its tile; for tiles of a few dozen
elements that is nearly all of the time. An output column computed by elementwise kernels only
(operators, RELU, EXP, CAST, ...) from tensor columns and constants gives, for tiles stacked
along a new first axis, the stacked results: broadcasting lines up the same way with the extra
axis in front, once a tile of fewer dimensions (a 0-d upstream gradient beside a matrix tile) has
its missing leading axes of 1 put after the new one. So the tuples of a batch whose tiles have the
same shapes and dtypes are evaluated together by the same compiled expression, and each tuple gets
its slice of the result. Anything else (CSR tiles, a key column inside a kernel, a small group) is
evaluated tuple by tuple, and so is a group whose stacked evaluation fails, so that its error is the
one a tuple's own call raises.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from trdb.execution.column_batch import ColumnBatch
from trdb.execution.tile_math.batched_kernels import aligned, compile_batched
from trdb.execution.tile_math.key_columns import key_function
from trdb.kernels.backend import Backend
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.plan import expressions as bx
from trdb.plan.types import TensorType

MIN_STACKED = 16  # fewer tuples of one shape are evaluated one by one (stacking costs more than it saves)
MAX_STACKED_ELEMENTS = 4096  # larger tiles gain nothing from stacking: their kernels' work outweighs the call

Row = tuple
Compiled = Callable[[Row], Any]


def stacked_projection(exprs: Sequence[bx.Bound], compiled: Sequence[Compiled],
                       backend: Backend) -> Optional[Callable[[list[Row]], list[Row]]]:
    """A function projecting a whole batch, or None where no output column can be stacked (or off the host)."""
    if backend is not NUMPY_BACKEND:
        return None
    columns = {i: bx.elementwise_columns(e) for i, e in enumerate(exprs)}
    stacked = [i for i, used in columns.items() if used is not None]
    if not stacked or any(_tile_elements(exprs[i]) > MAX_STACKED_ELEMENTS for i in stacked):
        return None
    inputs = sorted(set().union(*(columns[i] for i in stacked)))
    one_by_one = [i for i in range(len(exprs)) if i not in stacked]

    def one(row: Row) -> Row:
        return tuple(f(row) for f in compiled)

    def project(batch: list[Row]) -> list[Row]:
        out: list[Optional[Row]] = [None] * len(batch)
        for rows in _groups(batch, inputs):  # none in a batch of fewer than MIN_STACKED tuples
            results = _evaluated(batch, rows, inputs, [compiled[i] for i in stacked])
            if results is None:
                continue  # evaluated one by one below
            for position, row in enumerate(rows):
                values: list = [None] * len(exprs)
                for slot, result in zip(stacked, results):
                    values[slot] = result[position, ...]  # a view of the stacked result, 0-d for 0-d tiles
                for slot in one_by_one:
                    values[slot] = compiled[slot](batch[row])
                out[row] = tuple(values)
        return [row_out if row_out is not None else one(row) for row_out, row in zip(out, batch)]
    return project


def column_projection(exprs: Sequence[bx.Bound], compiled: Sequence[Compiled],
                      backend: Backend) -> Optional[Callable[[ColumnBatch], Optional[ColumnBatch]]]:
    """A function projecting a column batch into a column batch (columns passed on as they are, rekeys and
    COALESCE of keys on the key arrays, elementwise kernels of tile columns called once on their stacks), or
    None where some output column is none of these (or off the host). The function gives None for a batch it
    cannot project so: the tuples go one by one."""
    if backend is not NUMPY_BACKEND:
        return None
    steps: list[tuple[Optional[int], Optional[frozenset], Compiled, bool]] = []  # (column, tiles read, function,
    for expr, function in zip(exprs, compiled):                                # stacks lined up first)
        if isinstance(expr, bx.ColumnIndex):
            steps.append((expr.index, None, function, False))
            continue
        keyed = key_function(expr) if not isinstance(expr.type, TensorType) else None
        if keyed is not None:  # a rekey or COALESCE of keys, on the key arrays (tile_math/key_columns.py)
            steps.append((None, None, keyed, False))
            continue
        used = bx.elementwise_columns(expr)
        if not used or _tile_elements(expr) > MAX_STACKED_ELEMENTS:
            batched = _batched_step(expr, backend)  # a per-tile reduction inside (SUMSQ(v), REDUCE_SUM(v, 1))
            if batched is None:
                return None
            steps.append(batched)
            continue
        steps.append((None, frozenset(used), function, True))

    def project(batch: ColumnBatch) -> Optional[ColumnBatch]:
        columns, is_tile, row = [], [], tuple(batch.columns)
        for index, used, function, line_up in steps:
            if index is not None:
                columns.append(batch.columns[index])
                is_tile.append(batch.is_tile[index])
                continue
            if used is None:
                keys = function(batch)
                if keys is None:
                    return None
                columns.append(keys)
                is_tile.append(False)
                continue
            if not all(batch.is_tile[c] for c in used):
                return None
            try:
                result = function(_broadcastable(batch, used, row) if line_up else row)
            except Exception:  # the tuple-by-tuple evaluation raises the error a tuple's own call gives
                return None
            if type(result) is not np.ndarray or result.ndim < 1 or result.shape[0] != len(batch):
                return None
            columns.append(result)
            is_tile.append(True)
        return ColumnBatch(columns, is_tile)
    return project


def _batched_step(expr: bx.Bound, backend: Backend) -> Optional[tuple[None, frozenset, Compiled, bool]]:
    """A projection step for an output tile computed with per-tile reductions (tile_math/batched_kernels.py):
    its stacked value over the batch, the columns it reads as they are (no broadcasting to line up)."""
    if not isinstance(expr.type, TensorType):
        return None
    batched = batched_value(expr, backend)
    return None if batched is None else (None, batched[0], batched[1], False)


def batched_value(expr: bx.Bound, backend: Backend) -> Optional[tuple[frozenset, Compiled]]:
    """The tile columns `expr` reads and a function from a row of their stacks to its stacked value
    (tile_math/batched_kernels.py); None where it reads no tile, a tile larger than MAX_STACKED_ELEMENTS, or
    has no stacked form."""
    used = bx.tile_columns(expr)
    if not used or any(int(np.prod(c.type.tile)) > MAX_STACKED_ELEMENTS for c in used):
        return None
    batched = compile_batched(expr, backend)
    if batched is None:
        return None
    return frozenset(c.index for c in used), lambda row: batched(row)[0]


def _broadcastable(batch: ColumnBatch, used: frozenset, row: tuple) -> tuple:
    """The batch's columns, those of fewer dimensions among `used` with axes of 1 put after the tuples' axis
    (a 0-d gradient beside matrix tiles), so that their stacks broadcast as the tiles do."""
    ndim = max(batch.columns[c].ndim for c in used)
    if all(batch.columns[c].ndim == ndim for c in used):
        return row
    out = list(row)
    for c in used:
        out[c] = aligned(batch.columns[c], batch.columns[c].ndim - 1, ndim - 1)
    return tuple(out)


def _tile_elements(expr: bx.Bound) -> int:
    tile = getattr(expr.type, "tile", None)
    return int(np.prod(tile)) if tile else 0


def _groups(batch: list[Row], inputs: list[int]) -> list[list[int]]:
    """The positions of the batch's tuples by the shapes and dtypes of their input tiles (dense numpy arrays),
    groups large enough to stack."""
    groups: dict[tuple, list[int]] = {}
    for position, row in enumerate(batch):
        tiles = [row[i] for i in inputs]
        if all(type(t) is np.ndarray for t in tiles):
            groups.setdefault(tuple((t.shape, t.dtype) for t in tiles), []).append(position)
    return [rows for rows in groups.values() if len(rows) >= MIN_STACKED]


def _evaluated(batch: list[Row], rows: list[int], inputs: list[int], compiled: list[Compiled]) -> Optional[list]:
    """Each stacked expression's result over the group's tuples (first axis: the tuples), or None when the
    stacked evaluation fails or gives another number of results (they are then evaluated one by one)."""
    width = max(inputs) + 1
    fake: list[Any] = [None] * width
    ndim = max(batch[rows[0]][column].ndim for column in inputs)
    for column in inputs:
        stacked = np.stack([batch[row][column] for row in rows])
        # a tile of fewer dimensions broadcasts as if led by axes of 1: they go after the tuples' axis
        fake[column] = stacked.reshape(len(rows), *(1,) * (ndim + 1 - stacked.ndim), *stacked.shape[1:])
    try:
        results = [f(tuple(fake)) for f in compiled]
    except Exception:  # the tuple-by-tuple evaluation raises the error a tuple's own call gives
        return None
    if not all(type(r) is np.ndarray and r.ndim >= 1 and r.shape[0] == len(rows) for r in results):
        return None
    return results
