"""The function registry: every per-tuple kernel function and operator the binder can resolve."""
from __future__ import annotations

from typing import Optional

from trdb.catalog import einsum_rules
from trdb.catalog import shape_rules as rules
from trdb.catalog.kernel_args import NOT_CONST, Arg, KernelSignatureError
from trdb.catalog.kernel_function import KernelFunction
from trdb.kernels import functions as K
from trdb.kernels import sparse_functions as S

__all__ = ["NOT_CONST", "Arg", "KernelSignatureError", "KernelFunction", "OPERATORS",
           "lookup_function", "function_names", "is_aggregate"]

AGGREGATES = frozenset({"SUM", "AVG", "MIN", "MAX", "COUNT"})
ALIASES = {"MATRIX_MULTIPLY": "MATMUL"}
_MAX_DIMS = 64  # numpy's limit on dimensions bounds TRANSPOSE's axis list


def _elementwise(name: str, impl, arity: int, per_element: int = 1,
                 label: Optional[str] = None, sparse=None) -> KernelFunction:
    return KernelFunction(name, impl, arity, arity, rules.elementwise,
                          rules.elementwise_flops(per_element), label=label, sparse=sparse)


def _operator(symbol: str, impl, arity: int = 2, name: Optional[str] = None, sparse=None) -> KernelFunction:
    return _elementwise(name or symbol, impl, arity, label=f"operator {symbol}", sparse=sparse)


def _cast(xp, a, dtype):
    # The constant may be spelled 'FLOAT32' or 'double'; the kernel wants a real dtype.
    return K.cast(xp, a, rules.cast_dtype("CAST", None, dtype))


def _sparse_cast(xp, a, dtype):
    return S.cast(xp, a, rules.cast_dtype("CAST", None, dtype))


def _first_dtype(args: list[Arg]):
    """The dtype of the first argument (a tensor without one is float32): RESHAPE keeps it."""
    return args[0].dtype if args[0].dtype is not None else "float32"


def _axis_function(name: str, impl, rule, per_element: int, sparse=None) -> KernelFunction:
    return KernelFunction(name, impl, 1, 2, rule, rules.input_flops(per_element),
                          const_positions={1}, sparse=sparse)


def _build_functions() -> dict[str, KernelFunction]:
    table = [
        KernelFunction("MATMUL", K.matmul, 2, 2, rules.matmul, rules.matmul_flops, sparse=S.matmul),
        KernelFunction("EINSUM", K.einsum, 2, None, einsum_rules.einsum,
                       einsum_rules.einsum_flops, const_positions={0}, sparse=S.einsum),
        KernelFunction("TRANSPOSE", K.transpose, 1, 1 + _MAX_DIMS, rules.transpose,
                       rules.input_flops(1), const_positions=range(1, 1 + _MAX_DIMS), sparse=S.transpose),
        _elementwise("RELU", K.relu, 1, sparse=S.relu),
        _elementwise("SIGMOID", K.sigmoid, 1, per_element=4),
        _elementwise("TANH", K.tanh, 1, per_element=4, sparse=S.tanh),
        _elementwise("EXP", K.exp, 1, per_element=2),
        _elementwise("LOG", K.log, 1, per_element=2),
        _elementwise("SQRT", K.sqrt, 1, sparse=S.sqrt),
        _elementwise("ABS", K.absolute, 1, sparse=S.absolute),
        _elementwise("SQUARE", K.square, 1, sparse=S.square),
        _elementwise("POWER", K.power, 2, per_element=2, sparse=S.power),
        _elementwise("GREATEST", K.greatest, 2, sparse=S.greatest),
        _elementwise("LEAST", K.least, 2, sparse=S.least),
        _elementwise("ZEROS_LIKE", K.zeros_like, 1, sparse=S.zeros_like),
        _elementwise("ONES_LIKE", K.ones_like, 1),
        _elementwise("BCE_WITH_LOGITS", K.bce_with_logits, 2, per_element=7),
        _axis_function("SOFTMAX", K.softmax, rules.along_axis, per_element=5),
        _axis_function("LOG_SOFTMAX", K.log_softmax, rules.along_axis, per_element=5),
        KernelFunction("CROSS_ENTROPY", K.cross_entropy, 2, 3, rules.cross_entropy, rules.input_flops(7),
                       const_positions={2}, dtype_rule=rules.cross_entropy_dtype),
        _axis_function("ARGMAX", K.argmax, rules.reduction, per_element=1),
        KernelFunction("RESHAPE", K.reshape, 2, 1 + _MAX_DIMS, rules.reshape, rules.input_flops(1),
                       const_positions=range(1, 1 + _MAX_DIMS), dtype_rule=_first_dtype),
        _axis_function("REDUCE_SUM", K.reduce_sum, rules.reduction, per_element=1, sparse=S.reduce_sum),
        _axis_function("REDUCE_MAX", K.reduce_max, rules.reduction, per_element=1, sparse=S.reduce_max),
        _axis_function("REDUCE_MEAN", K.reduce_mean, rules.reduction, per_element=1, sparse=S.reduce_mean),
        KernelFunction("SUMSQ", K.sumsq, 1, 1, rules.full_reduction, rules.input_flops(2), sparse=S.sumsq),
        KernelFunction("CAST", _cast, 2, 2, rules.cast, rules.input_flops(1),
                       const_positions={1}, sparse=_sparse_cast),
    ]
    return {f.name: f for f in table}


def _build_operators() -> dict[str, KernelFunction]:
    table = [
        _operator("+", K.add, sparse=S.add), _operator("-", K.subtract, sparse=S.subtract),
        _operator("*", K.multiply, sparse=S.multiply), _operator("/", K.divide, sparse=S.divide),
        _operator("//", K.floor_divide), _operator("%", K.remainder),
        _operator("-", K.negative, arity=1, name="NEG", sparse=S.negative),
        _operator("=", K.equal), _operator("<>", K.not_equal), _operator("<", K.less),
        _operator("<=", K.less_equal), _operator(">", K.greater), _operator(">=", K.greater_equal),
    ]
    return {f.name: f for f in table}


FUNCTIONS: dict[str, KernelFunction] = _build_functions()
OPERATORS: dict[str, KernelFunction] = _build_operators()


def lookup_function(name: str) -> Optional[KernelFunction]:
    """The kernel function called `name` (any case, aliases resolved), or None."""
    key = name.upper()
    return FUNCTIONS.get(ALIASES.get(key, key))


def function_names() -> list[str]:
    """Every kernel function name and alias, for 'did you mean' suggestions."""
    return sorted([*FUNCTIONS, *ALIASES])


def is_aggregate(name: str) -> bool:
    """Whether `name` is an aggregate (SUM, AVG, MIN, MAX, COUNT), implemented elsewhere."""
    return name.upper() in AGGREGATES
