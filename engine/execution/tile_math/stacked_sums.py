"""SUM, AVG, MIN, MAX and COUNT of many small tiles at once: a batch's tiles stacked, the argument's kernels called
once, the group results taken by one reduction per group instead of one addition (or minimum) per tuple.

An aggregate over tuples of a few dozen elements spends nearly all its time in Python, a kernel call and
an addition per tuple (12 us a tuple over 8 x 8 tiles). Where every call is SUM, AVG, MIN, MAX or
COUNT(*) over float tiles and each argument is a column, elementwise kernels of columns (as
tile_math/stacked_tiles.py evaluates them stacked), or SUMSQ / REDUCE_SUM (all axes) of such, a batch
whose input tiles are dense and of one shape and dtype is evaluated stacked along a new first axis, and
each group's part of it is reduced along that axis (elementwise: MIN and MAX are numpy's minimum and
maximum, which the tuple-by-tuple fold uses too). The sums are the same as the tuple-by-tuple ones up to
rounding (numpy sums a stack pairwise); minima and maxima are the same. Any other batch, and any other
aggregate, goes tuple by tuple.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from trdb.execution.column_batch import ColumnBatch, is_columns
from trdb.execution.tile_math.batched_kernels import compile_product_sum
from trdb.execution.tile_math.compile import compile_expr
from trdb.execution.tile_math.stacked_tiles import MAX_STACKED_ELEMENTS, MIN_STACKED, batched_value
from trdb.execution.work import charge
from trdb.kernels.axis_reductions import summed_rows
from trdb.kernels.backend import Backend
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.plan import expressions as bx
from trdb.plan.logical import AggregateCall
from trdb.plan.types import KeyType, ScalarType, TensorType

Row = tuple
# per group key: the tuples' count, then each call's sum over them (None for COUNT)
GroupSums = dict[tuple, tuple[int, list]]
_REDUCTIONS = {"SUMSQ": lambda stack: np.einsum("ij,ij->i", stack, stack),
               "REDUCE_SUM": lambda stack: stack.sum(axis=1)}
# how each call's values of one group are combined, elementwise (COUNT has none)
COMBINE = {"SUM": np.add, "AVG": np.add, "MIN": np.minimum, "MAX": np.maximum}
SMALL_PRODUCT_FLOPS = 8192  # a tile product of at most this much work (16 x 16 by 16 x 16) is summed stacked


class _Argument:
    """One call's argument evaluated over stacked tiles: the elementwise part, then a per-tile reduction. `lines_up`:
    it takes stacks of any tile shapes (tile_math/batched_kernels.py lines their axes up, a product pairs them)."""

    def __init__(self, inner: Callable[[Row], Any], reduction: Optional[str], lines_up: bool = False,
                 summed: Optional[Callable[[Row], np.ndarray]] = None):
        self.inner, self.reduction, self.lines_up = inner, reduction, lines_up
        self.summed = summed  # the sum over all tuples, made at once (a product's: batched_kernels.compile_product_sum)

    def per_tuple(self, fake: Row, count: int) -> Optional[np.ndarray]:
        """The argument of each tuple along the first axis, or None where the stacked evaluation does not fit."""
        values = self.inner(fake)
        if type(values) is not np.ndarray or values.ndim < 1 or values.shape[0] != count:
            return None
        if self.reduction is None:
            return values
        charge(values.size * (2 if self.reduction == "SUMSQ" else 1), values.nbytes)  # as the kernel's own call would
        return _REDUCTIONS[self.reduction](values.reshape(count, -1))


def stacked_sums(calls: Sequence[AggregateCall],
                 backend: Backend) -> Optional[Callable[[list[Row], list], tuple[GroupSums, list[int]]]]:
    """A function from a batch and its tuples' group keys to each group's count and sums over the tuples it
    could stack, and the positions of the others (to be added one by one); None where the aggregate cannot
    be summed stacked at all."""
    if backend is not NUMPY_BACKEND or not calls:
        return None
    arguments: list[Optional[_Argument]] = []
    columns: set[int] = set()
    keys: set[int] = set()  # key columns a MIN or MAX reads
    for call in calls:
        if call.function == "COUNT" and (call.arg is None or isinstance(call.arg.type, TensorType)):
            arguments.append(None)  # a tensor value is never NULL (an outer join's missing side is zeros): counted
            continue
        found = _argument(call, backend, columns) if call.function in COMBINE else None
        if found is None and call.function in ("MIN", "MAX"):
            found = _key_argument(call, keys)
        if found is None:
            return None
        arguments.append(found)
    inputs = sorted(columns)  # none where every call is COUNT(*): counted by group, no tile read
    key_inputs = sorted(keys)
    combine = [COMBINE.get(call.function) for call in calls]
    one_shape = not all(a is None or a.lines_up for a in arguments)  # else `x.v @ w.v` stacks a row and a matrix

    def per_tuple(batch: ColumnBatch) -> Optional[list]:
        """Each call's value for each tuple of a column batch along the first axis (None for COUNT), or None
        where its columns do not stack (tile_math/column_groups.py adds them up by group)."""
        fake = _column_stacks(batch, inputs, one_shape)
        if fake is None or not all(not batch.is_tile[c] and fake[c].dtype.kind in "iu" for c in key_inputs):
            return None
        return _evaluated(arguments, fake, len(batch))

    def sums(batch: list[Row], keys: list[tuple]) -> tuple[GroupSums, list[int]]:
        """The group sums of the batch's tuples that could be stacked, and the positions of the others."""
        out: GroupSums = {}
        left: list[int] = []
        if is_columns(batch):  # its tiles are stacked already
            evaluated = per_tuple(batch)
            if evaluated is not None:
                for key, (positions, values) in _group_sums(keys, evaluated, combine).items():
                    out[key] = (len(positions), values)
                return out, []
        for rows in _by_shape(batch, inputs):
            group = [batch[r] for r in rows]
            fake = _stacked_columns(group, inputs, one_shape) if len(rows) >= MIN_STACKED else None
            evaluated = _evaluated(arguments, fake, len(rows)) if fake is not None else None
            if evaluated is None:
                left.extend(rows)
                continue
            for key, (positions, values) in _group_sums([keys[r] for r in rows], evaluated, combine).items():
                if not _merged(out, key, len(positions), values, combine):
                    left.extend(rows[p] for p in positions)  # the accumulator reports tiles of two shapes
        return out, sorted(left)

    def group_total(batch: ColumnBatch) -> Optional[list]:
        """Each call's value over all of a column batch's tuples, as one group's `(1, ...)` (None for COUNT): a sum of
        products made at once (`_Argument.summed`), the others reduced by their ufunc; None where they do not stack."""
        fake = _column_stacks(batch, inputs, one_shape)
        if fake is None or not all(not batch.is_tile[c] and fake[c].dtype.kind in "iu" for c in key_inputs):
            return None
        totals: list = []
        try:
            for argument, ufunc in zip(arguments, combine):
                if argument is None:
                    totals.append(None)
                    continue
                if argument.summed is not None and ufunc is np.add:
                    total = argument.summed(fake)
                else:
                    values = argument.per_tuple(fake, len(batch))
                    if values is None:
                        return None
                    total = summed_rows(values) if ufunc is np.add else ufunc.reduce(values, axis=0)
                totals.append(np.asarray(total)[np.newaxis])
        except Exception:  # the tuple-by-tuple evaluation raises the error a tuple's own call gives
            return None
        return totals
    sums.per_tuple = per_tuple  # type: ignore[attr-defined]
    sums.group_total = group_total  # type: ignore[attr-defined]
    return sums


def _evaluated(arguments: list, fake: Row, count: int) -> Optional[list]:
    """Each call's per-tuple values over the stacked tiles (None for COUNT), or None where one does not fit."""
    try:
        evaluated = [None if a is None else a.per_tuple(fake, count) for a in arguments]
    except Exception:  # the tuple-by-tuple evaluation raises the error a tuple's own call gives
        return None
    if any(e is None for e, a in zip(evaluated, arguments) if a is not None):
        return None
    return evaluated


def _by_shape(batch: list[Row], inputs: list[int]) -> list[list[int]]:
    """The batch's positions by the shapes and dtypes of their input tiles (ragged edge tiles apart)."""
    groups: dict[tuple, list[int]] = {}
    for position, row in enumerate(batch):
        groups.setdefault(tuple((type(row[c]), getattr(row[c], "shape", None), getattr(row[c], "dtype", None))
                                for c in inputs), []).append(position)
    return list(groups.values())


def _merged(out: GroupSums, key: tuple, count: int, values: list, combine: list) -> bool:
    """Combine one shape group's results of a group key with the batch's; False where the key's results so far have
    another shape (tiles of two shapes in one group: an error the tuple-by-tuple addition reports)."""
    if key not in out:
        out[key] = (count, values)
        return True
    before, sums = out[key]
    if any(a is not None and np.shape(a) != np.shape(b) for a, b in zip(sums, values)):
        return False
    out[key] = (before + count, [None if a is None else f(a, b) for a, b, f in zip(sums, values, combine)])
    return True


def _argument(call: AggregateCall, backend: Backend, columns: set[int]) -> Optional[_Argument]:
    """The stacked form of a SUM's argument, its tensor columns added to `columns`; None where there is none."""
    arg, reduction = call.arg, None
    if isinstance(arg, bx.Call) and arg.function.name in _REDUCTIONS and len(arg.args) == 1:
        arg, reduction = arg.args[0], arg.function.name
    if not isinstance(arg.type, TensorType) or np.dtype(arg.type.dtype).kind != "f":
        return None
    if int(np.prod(arg.type.tile)) > MAX_STACKED_ELEMENTS or not arg.type.tile:
        return _batched_argument(call.arg, backend, columns)
    if isinstance(arg, bx.ColumnIndex):
        columns.add(arg.index)
        return _Argument(lambda fake, index=arg.index: fake[index], reduction)
    used = bx.elementwise_columns(arg)
    if used is None:
        return _batched_argument(call.arg, backend, columns)
    columns |= used
    return _Argument(compile_expr(arg, backend), reduction)


def _key_argument(call: AggregateCall, keys: set[int]) -> Optional[_Argument]:
    """MIN or MAX of a key column: its int64 array over a column batch (the tuples of a list batch, whose keys are
    Python ints, go one by one; SUM and AVG of keys too, as Python ints do not overflow)."""
    arg = call.arg
    integer = isinstance(arg.type, KeyType) or isinstance(arg.type, ScalarType) and arg.type.python_type is int
    if not isinstance(arg, bx.ColumnIndex) or not integer:
        return None
    keys.add(arg.index)
    return _Argument(lambda fake, index=arg.index: fake[index], None)


def _batched_argument(arg: bx.Bound, backend: Backend, columns: set[int]) -> Optional[_Argument]:
    """An argument with kernels that reduce each tile inside (`1 + SUMSQ(v)`, `REDUCE_SUM(SQUARE(v), 1)`),
    evaluated on the stacks by tile_math/batched_kernels.py; None where it has no stacked form."""
    if not isinstance(arg.type, TensorType) or np.dtype(arg.type.dtype).kind != "f":
        return None
    if isinstance(arg, bx.Call) and arg.function.name in ("MATMUL", "EINSUM") and not _small_product(arg):
        return None  # a SUM of products: added into its group's tile as it is made (tile_math/product_sum.py)
    batched = batched_value(arg, backend)
    if batched is None:
        return None
    columns |= batched[0]
    summed = compile_product_sum(arg, backend) if isinstance(arg, bx.Call) and arg.function.name == "MATMUL" else None
    return _Argument(batched[1], None, lines_up=True, summed=summed)


def _small_product(arg: bx.Call) -> bool:
    """Whether a product of matrix tiles does little work (a row's outer product `MATMUL(TRANSPOSE(E.v), E.v)`):
    one batched matmul and a segment sum then cost less than a kernel call a tuple (0.3 against 16 us a tuple of
    1 x 8); a larger product goes into its group's tile as it is made."""
    if arg.function.name != "MATMUL" or len(arg.args) != 2:
        return False
    left, right = (a.type.tile if isinstance(a.type, TensorType) else () for a in arg.args)
    return len(left) == len(right) == 2 and 2 * left[0] * left[1] * right[1] <= SMALL_PRODUCT_FLOPS


def _stacked_columns(batch: list[Row], inputs: list[int], one_shape: bool = True) -> Optional[Row]:
    """A row whose input columns hold the batch's tiles stacked, or None unless they are all dense numpy tiles of
    one shape and dtype per column (`one_shape`: the same shapes in every column, no broadcasting between stacks)."""
    fake: list[Any] = [None] * (max(inputs, default=-1) + 1)
    shape = None
    for column in inputs:
        tiles = [row[column] for row in batch]
        first = tiles[0]
        if type(first) is not np.ndarray or first.dtype.kind != "f" or (one_shape and shape not in (None, first.shape)):
            return None
        shape = first.shape
        if not all(type(t) is np.ndarray and t.shape == shape and t.dtype == first.dtype for t in tiles):
            return None
        fake[column] = np.stack(tiles)
    return tuple(fake)


def _column_stacks(batch: ColumnBatch, inputs: list[int], one_shape: bool = True) -> Optional[Row]:
    """`_stacked_columns` of a column batch: its input columns' stacks, where they are float tiles (of one shape)."""
    stacks = [batch.columns[c] for c in inputs]
    if not all(batch.is_tile[c] for c in inputs) or any(s.dtype.kind != "f" for s in stacks) or \
            (one_shape and len({s.shape for s in stacks}) > 1):
        return None
    return tuple(batch.columns)


def _group_sums(keys: list[tuple], evaluated: list[Optional[np.ndarray]],
                combine: list) -> dict[tuple, tuple[list[int], list]]:
    """Each group's positions among `keys` and, per call, its tuples' values reduced along the first axis by
    the call's ufunc (`combine`)."""
    if keys and keys[0] == () and len(keys[-1]) == 0:  # no GROUP BY: the one group of every tuple
        return {(): (range(len(keys)), [None if values is None else _summed(values, f)
                                        for values, f in zip(evaluated, combine)])}
    positions: dict[tuple, list[int]] = {}
    for position, key in enumerate(keys):
        positions.setdefault(key, []).append(position)
    out = {}
    for key, rows in positions.items():
        whole = len(rows) == len(keys)
        out[key] = (rows, [None if values is None else _summed(values if whole else values[rows], f)
                           for values, f in zip(evaluated, combine)])
    return out


def _summed(values: np.ndarray, combine=np.add) -> Any:
    """The tuples' values reduced along the first axis by `combine` (added, or their elementwise minimum or
    maximum), in their dtype (charged as the additions one by one)."""
    charge(values.size, 3 * values.nbytes)
    if combine is np.add:
        return values.sum(axis=0, dtype=values.dtype)
    return combine.reduce(values, axis=0)
