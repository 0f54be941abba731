"""Typed kernel-call expressions built by the engine itself (gradient plans, EINSUM plans), with the binder's rules."""
from __future__ import annotations

from typing import Union

import numpy as np

from trdb.catalog.functions import OPERATORS, KernelFunction, KernelSignatureError, lookup_function
from trdb.errors import InternalError
from trdb.plan import expressions as bx
from trdb.plan.types import ScalarType, TensorType
from trdb.planner.expression_binder import ExpressionBinder, constant, to_arg

Operand = Union[bx.Bound, int, float, str, None]


def as_bound(value: Operand) -> bx.Bound:
    if isinstance(value, (bx.ColumnIndex, bx.Const, bx.Call, bx.KeyArith, bx.Compare, bx.Logical,
                          bx.Not, bx.InSet, bx.IsNullTest, bx.Coalesce)):
        return value
    if value is None:
        return bx.Const(None, ScalarType(type(None)))
    return constant(value)


def call(function: Union[str, KernelFunction], *args: Operand) -> bx.Call:
    """A kernel call with its inferred type; a failure here is a bug in a derivative rule."""
    if isinstance(function, str):
        function = OPERATORS.get(function) or lookup_function(function)
    bound = [as_bound(a) for a in args]
    try:
        result = function.infer([to_arg(a) for a in bound])
    except KernelSignatureError as exc:
        raise InternalError(f"gradient rule built a bad kernel call: {exc}") from None
    shape = tuple(result.shape or ())
    extent = ExpressionBinder._extent(function, bound, shape)
    return bx.Call(function, tuple(bound), TensorType(np.dtype(result.dtype), shape, extent))


def is_tensor(expr: bx.Bound) -> bool:
    return isinstance(expr.type, TensorType)
