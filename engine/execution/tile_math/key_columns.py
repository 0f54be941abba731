"""Key expressions and conditions on keys over a column batch's key arrays: one numpy call a batch, the values the
tuple-by-tuple closures of tile_math/compile.py give.

A rekey (`i // 8`, `i + j`), a COALESCE of keys (a FULL join's `COALESCE(A.i, B.i)`) or a condition on keys
(`i < 5 AND j = i`) is evaluated per tuple by Python ints; over a column batch it is evaluated on the
key columns' int64 arrays at once. NULL keys (an outer join's missing side: a masked array, see
column_batch.py) propagate as the closures propagate None: arithmetic on NULL is NULL, a comparison
with NULL is false, NOT of it true (compile_predicate's `is True`). Where the arrays could give another
answer than the closures (a division by zero, which they report; a value past BIGINT; a tile column;
a constant that is not an int) the function gives None and the batch goes tuple by tuple. A condition
on each tuple's tiles that gives one truth value a tuple (`SUMSQ(E.v) > 8`, beside conditions on keys)
is evaluated on the batch's tile stacks (tile_math/batched_kernels.py).
"""
from __future__ import annotations

import math
import operator
from typing import Callable, Optional

import numpy as np

from trdb.execution.column_batch import ColumnBatch
from trdb.execution.tile_math.batched_kernels import compile_batched
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.plan import expressions as bx
from trdb.plan.types import TensorType

Values = tuple[np.ndarray, Optional[np.ndarray]]  # int64 (or bool) values, and where they are NULL (None: nowhere)
Evaluate = Callable[[ColumnBatch], Optional[Values]]
_SAFE = {"+": 1 << 62, "-": 1 << 62, "*": 1 << 31}  # operands within these bounds cannot leave int64
_INT64_MIN = np.iinfo(np.int64).min


def _truncated_quotient(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """SQL's integer division (toward zero; expressions.truncated_quotient) of arrays without a zero in `b`."""
    quotient = np.floor_divide(a, b)
    return quotient + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0)))


_ARRAY_OPS = {"+": np.add, "-": np.subtract, "*": np.multiply, "//": _truncated_quotient, "%": np.fmod}


class _Unsupported(Exception):
    """This batch's arrays cannot give the closures' answer: it goes tuple by tuple."""


def key_function(expr: bx.Bound) -> Optional[Callable[[ColumnBatch], Optional[np.ndarray]]]:
    """A function from a column batch to the key expression's values (int64, masked where NULL), or None where
    `expr` is not a key expression of key columns and int constants; the function gives None for a batch whose
    arrays cannot give the tuple-by-tuple answer."""
    evaluate = _compiled(expr)
    if evaluate is None:
        return None

    def run(batch: ColumnBatch) -> Optional[np.ndarray]:
        try:
            values, null = evaluate(batch)
        except _Unsupported:
            return None
        return np.ma.MaskedArray(values, null) if null is not None and null.any() else values
    return run


def predicate_function(expr: bx.Bound) -> Optional[Callable[[ColumnBatch], Optional[np.ndarray]]]:
    """A function from a column batch to where a condition on keys holds (a bool array: NULL is false), or None
    where `expr` is not such a condition; the function gives None for a batch it cannot evaluate."""
    evaluate = _condition(expr)
    if evaluate is None:
        return None

    def run(batch: ColumnBatch) -> Optional[np.ndarray]:
        try:
            return evaluate(batch)[0]  # where it is true: unknown (NULL) keeps no tuple
        except _Unsupported:
            return None
    return run


def _compiled(expr: bx.Bound) -> Optional[Evaluate]:
    """A key expression's evaluation over a batch, or None where it is not one of key columns and int constants."""
    if isinstance(expr, bx.ColumnIndex):
        return lambda batch, index=expr.index: _key_column(batch, index)
    if isinstance(expr, bx.Const):
        if type(expr.value) is not int or not -(1 << 63) <= expr.value < 1 << 63:
            return None
        return lambda batch, value=expr.value: (np.full(len(batch), value, dtype=np.int64), None)
    if isinstance(expr, bx.KeyArith) and expr.op in _ARRAY_OPS:
        left, right = _compiled(expr.left), _compiled(expr.right)
        if left is None or right is None:
            return None
        return lambda batch: _arith(expr.op, left(batch), right(batch))
    if isinstance(expr, bx.Coalesce):
        args = [_compiled(a) for a in expr.args]
        return None if any(a is None for a in args) else lambda batch: _coalesce([a(batch) for a in args])
    return None


def _key_column(batch: ColumnBatch, index: int) -> Values:
    column = batch.columns[index]
    if batch.is_tile[index] or column.dtype.kind not in "iu":
        raise _Unsupported
    if isinstance(column, np.ma.MaskedArray):
        return column.data.astype(np.int64, copy=False), np.ma.getmaskarray(column)
    return column.astype(np.int64, copy=False), None


def _arith(op: str, left: Values, right: Values) -> Values:
    (a, a_null), (b, b_null) = left, right
    null = _either(a_null, b_null)
    if null is not None:  # NULL rows compute on harmless values; their result is NULL whatever it is
        a, b = np.where(null, 0, a), np.where(null, 1, b)
    if op in _SAFE:
        bound = _SAFE[op]
        if len(a) and not all(-bound < int(x.min()) and int(x.max()) < bound for x in (a, b)):
            raise _Unsupported  # may leave int64: the closures decide (and report it)
    elif len(b) and (not b.all() or ((a == _INT64_MIN) & (b == -1)).any()):
        raise _Unsupported  # a division by zero, or out of int64: the tuple's closure reports it
    return _ARRAY_OPS[op](a, b), null


def _coalesce(args: list[Values]) -> Values:
    values, null = args[0]
    for other, other_null in args[1:]:
        if null is None:
            break
        values = np.where(null, other, values)
        null = None if other_null is None else null & other_null
    return values, null


def _either(a: Optional[np.ndarray], b: Optional[np.ndarray]) -> Optional[np.ndarray]:
    if a is None:
        return b
    return a if b is None else a | b


_COMPARE = {"=": operator.eq, "<>": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
            ">=": operator.ge}


Truth = tuple[np.ndarray, Optional[np.ndarray]]  # where a condition is true, and where it is unknown (None: nowhere)


def _condition(expr: bx.Bound) -> Optional[Callable[[ColumnBatch], Truth]]:
    """A condition on keys over a batch in SQL's three-valued logic (a comparison with NULL is unknown, NOT
    of unknown is unknown, FALSE decides an AND and TRUE an OR), or None where it is not one."""
    if isinstance(expr.type, TensorType):
        truth = _tile_truth(expr)
        return None if truth is None else lambda batch: (truth(batch), None)
    if isinstance(expr, bx.Compare) and expr.op in _COMPARE:
        left, right = _compiled(expr.left), _compiled(expr.right)
        if left is None or right is None:
            return None
        return lambda batch: _compared(_COMPARE[expr.op], left(batch), right(batch))
    if isinstance(expr, bx.Logical):
        args = [_condition(a) for a in expr.args]
        if any(a is None for a in args):
            return None
        combine = _all_true if expr.op == "AND" else _any_true
        return lambda batch: combine([a(batch) for a in args], len(batch))
    if isinstance(expr, bx.Not):
        arg = _condition(expr.arg)
        return None if arg is None else lambda batch: _negated(arg(batch))
    if isinstance(expr, bx.InSet):
        return _in_set(expr)
    if isinstance(expr, bx.IsNullTest):
        arg = _compiled(expr.arg)
        return None if arg is None else lambda batch: (_is_null(arg(batch), len(batch)) != expr.negated, None)
    return None


def _all_true(args: list[Truth], rows: int) -> Truth:
    """AND: true where every argument is; unknown where none is false and one is unknown."""
    true, false, unknown = np.ones(rows, bool), np.zeros(rows, bool), np.zeros(rows, bool)
    for value, null in args:
        true &= value
        false |= ~value if null is None else ~value & ~null
        if null is not None:
            unknown |= null
    return true, _unknown(unknown & ~false)


def _any_true(args: list[Truth], rows: int) -> Truth:
    """OR: true where an argument is; unknown where none is and one is unknown."""
    true, unknown = np.zeros(rows, bool), np.zeros(rows, bool)
    for value, null in args:
        true |= value
        if null is not None:
            unknown |= null
    return true, _unknown(unknown & ~true)


def _negated(truth: Truth) -> Truth:
    value, null = truth
    return (~value, None) if null is None else (~value & ~null, null)


def _unknown(null: np.ndarray) -> Optional[np.ndarray]:
    return null if null.any() else None


def _tile_truth(expr: bx.Bound) -> Optional[Callable[[ColumnBatch], np.ndarray]]:
    """Where a condition on each tuple's tiles holds, one value a tuple (compile_predicate's truth of a one-element
    tile), evaluated on the batch's stacks; None where it has no stacked form."""
    used = [column.index for column in bx.tile_columns(expr)]
    batched = compile_batched(expr, NUMPY_BACKEND) if math.prod(expr.type.tile) == 1 and used else None
    if batched is None:
        return None

    def run(batch: ColumnBatch) -> np.ndarray:
        if not all(batch.is_tile[c] and type(batch.columns[c]) is np.ndarray for c in used):
            raise _Unsupported
        try:
            values = np.asarray(batched(tuple(batch.columns))[0])
        except Exception:  # the tuple-by-tuple evaluation raises the error a tuple's own call gives
            raise _Unsupported from None
        if values.size != len(batch) or values.shape[:1] != (len(batch),):
            raise _Unsupported
        return values.reshape(len(batch)).astype(bool, copy=False)
    return run


def _compared(op, left: Values, right: Values) -> Truth:
    (a, a_null), (b, b_null) = left, right
    out = op(a, b)
    null = _either(a_null, b_null)
    return (out, None) if null is None else (out & ~null, null)


def _in_set(expr: bx.InSet) -> Optional[Callable[[ColumnBatch], Truth]]:
    arg = _compiled(expr.arg)
    if arg is None or not all(type(v) is int and -(1 << 63) <= v < 1 << 63 for v in expr.values):
        return None
    members = np.array(sorted(expr.values), dtype=np.int64)

    def run(batch: ColumnBatch) -> Truth:
        values, null = arg(batch)
        out = np.isin(values, members) != expr.negated
        return (out, None) if null is None else (out & ~null, null)
    return run


def _is_null(values: Values, rows: int) -> np.ndarray:
    return values[1] if values[1] is not None else np.zeros(rows, dtype=bool)
