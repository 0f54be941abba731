"""Compiles bound expressions once per query into closures over a kernel backend (never eval)."""
from __future__ import annotations

import operator
from typing import Any, Callable, Optional

import numpy as np

from trdb.errors import DataError
from trdb.execution.tile_math.inplace import inplace_kernel
from trdb.execution.work import counted, current
from trdb.kernels import functions as K
from trdb.kernels.backend import Backend, to_host
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.kernels.sparse import is_sparse
from trdb.plan import expressions as bx

Row = tuple
Compiled = Callable[[Row], Any]


def compile_expr(expr: bx.Bound, backend: Backend) -> Compiled:
    compiler = _COMPILERS.get(type(expr))
    if compiler is None:
        raise TypeError(f"cannot compile {type(expr).__name__}")
    return compiler(expr, backend)


def compile_predicate(expr: bx.Bound, backend: Backend) -> Callable[[Row], bool]:
    """A predicate: keys compare to bools; a tensor condition must hold one element per tuple."""
    value = compile_expr(expr, backend)
    if not hasattr(expr.type, "tile"):
        return lambda row: value(row) is True
    return lambda row: _truth(value(row))


def _truth(value: Any) -> bool:
    array = np.asarray(to_host(value))  # a GPU's 0-d array copied back, a CSR tile expanded
    if array.size != 1:
        raise DataError(f"a condition on a tensor must give one value per tuple, got shape {array.shape}")
    return bool(array.reshape(()))


def _column(expr: bx.ColumnIndex, backend: Backend) -> Compiled:
    return operator.itemgetter(expr.index)


def _const(expr: bx.Const, backend: Backend) -> Compiled:
    value = backend.asarray(expr.value) if isinstance(expr.value, np.ndarray) else expr.value
    return lambda row: value


def _call(expr: bx.Call, backend: Backend) -> Compiled:
    if expr.function.name == "MATMUL" and len(expr.args) == 2 and backend is NUMPY_BACKEND \
            and plain_transpose(expr.args[0]) is not None:
        return _transposed_left_product(expr, backend)
    args = [compile_expr(a, backend) for a in expr.args]
    inplace = inplace_kernel(expr, backend)
    if inplace is not None:
        run = _lined_up(expr, counted(expr.function, inplace))
        return lambda row: run([arg(row) for arg in args])
    call = kernel_call(expr, backend)
    if expr.function.name in LAYOUT_VIEWS and all(isinstance(a, bx.Const) for a in expr.args[1:]):
        call = _layout_view(expr, call, backend)
    if len(args) == 1:
        (a,) = args
        return lambda row: call([a(row)])
    if len(args) == 2:
        a, b = args
        return lambda row: call([a(row), b(row)])
    return lambda row: call([arg(row) for arg in args])


def kernel_call(expr: bx.Call, backend: Backend) -> Callable[[list], Any]:
    """The call's kernel on its argument values, its work counted and its tiles' line-up checked."""
    function = expr.function
    return _lined_up(expr, counted(function, lambda values: function.call(backend, values)))


def plain_transpose(expr: bx.Bound) -> Optional[bx.Bound]:
    """The matrix operand of TRANSPOSE(a) or TRANSPOSE(a, 1, 0) of matrix tiles (a gradient's Âᵀ); else None."""
    if not (isinstance(expr, bx.Call) and expr.function.name == "TRANSPOSE" and len(getattr(expr.type, "tile", None)
                                                                                    or ()) == 2):
        return None
    axes = expr.args[1:]
    if not all(isinstance(axis, bx.Const) for axis in axes) or [axis.value for axis in axes] not in ([], [1, 0]):
        return None
    return expr.args[0]


def _sparse_transposed(a: Any, b: Any) -> bool:
    """Whether aᵀ·b can be scipy's CSC product on a host CSR `a`'s own arrays, with a dense `b` of its dtype."""
    return (is_sparse(a) and a.format == "csr" and isinstance(a.data, np.ndarray) and type(b) is np.ndarray
            and b.ndim == 2 and a.shape[0] == b.shape[0] and a.dtype == b.dtype)


class ProductOperands:
    """A product's two operands from a row. For MATMUL(TRANSPOSE(a), b) of a host CSR `a` (a gradient's Âᵀ·G;
    `transposable`: the product is a MATMUL), `a` itself, flagged `transposed`: the caller multiplies its CSC
    view aᵀ (scipy's kernel on a's own arrays), with no transposed copy of `a` made (Cora's Âᵀ·G: 0.19 against
    0.35 ms); else the operands as the kernels give them."""

    def __init__(self, left: bx.Bound, right: bx.Bound, backend: Backend, transposable: bool = True):
        inner = plain_transpose(left) if transposable and backend is NUMPY_BACKEND else None
        self._left = compile_expr(left if inner is None else inner, backend)
        self._right = compile_expr(right, backend)
        self._transpose = None if inner is None else (kernel_call(left, backend), [a.value for a in left.args[1:]])

    def __call__(self, row: Row) -> tuple[Any, Any, bool]:
        """(a, b, transposed): `transposed`, the product is aᵀ·b of a CSR `a`; else a·b."""
        a, b = self._left(row), self._right(row)
        if self._transpose is None:
            return a, b, False
        if _sparse_transposed(a, b):
            return a, b, True
        return self.transposed(a), b, False

    def transposed(self, a: Any) -> Any:
        """The TRANSPOSE's own call on `a` (where a product of its view does not apply after all)."""
        transpose, constants = self._transpose
        return transpose([a, *constants])


def transposed_view_product(function: Any) -> Callable[[list], Any]:
    """aᵀ·b of a CSR `a` (as ProductOperands flags it) by scipy's CSC kernel, its work counted as MATMUL's."""
    return counted(function, lambda values: values[0].T @ values[1])


def _transposed_left_product(expr: bx.Call, backend: Backend) -> Compiled:
    """MATMUL(TRANSPOSE(a), b): ProductOperands' view product for a CSR `a`, else the two kernels' calls."""
    operands, product = ProductOperands(*expr.args, backend), kernel_call(expr, backend)
    view = transposed_view_product(expr.function)

    def run(row: Row) -> Any:
        a, b, transposed = operands(row)
        return view([a, b]) if transposed else product([a, b])
    return run


LAYOUT_VIEWS = {"RESHAPE": K.reshape, "TRANSPOSE": K.transpose}  # kernels whose result is a view of their tile


def _layout_view(expr: bx.Call, call: Callable[[list], Any], backend: Backend) -> Callable[[list], Any]:
    """RESHAPE or TRANSPOSE by constants of a dense numpy tile of a shape the kernel's call took already: the
    kernel's own function on it (numpy's view), without the call's checks (a LLaMA block reshapes 50 tiles: 14 us
    a call through the kernel, about 2 us here). Other tiles, and the first of each shape, go through `call`,
    which checks them and counts the work."""
    if backend is not NUMPY_BACKEND:
        return call
    function, consts = LAYOUT_VIEWS[expr.function.name], [a.value for a in expr.args[1:]]
    seen: set = set()

    def run(values: list) -> Any:
        tile = values[0]
        if type(tile) is np.ndarray and tile.shape in seen and current() is None:  # counted: through `call`
            try:
                return function(np, tile, *consts)
            except (TypeError, ValueError):
                pass  # the kernel's call says what is wrong
        out = call(values)
        if type(tile) is np.ndarray and type(out) is np.ndarray and len(seen) < _SHAPES_KEPT:
            seen.add(tile.shape)
        return out
    return run


_SHAPES_KEPT = 64  # input shapes a layout call remembers (a tensor's tiles come in a few: full and edge)


def _lined_up(expr: bx.Call, call: Callable[[list], Any]) -> Callable[[list], Any]:
    lined_up = _lined_up_axes(expr)
    return _checking(expr, lined_up, call) if lined_up else call


def _lined_up_axes(expr: bx.Call) -> list[tuple[int, int, list[int]]]:
    """For an elementwise kernel of several tiles: (i, j, axes) where arguments i and j must have the same size
    at run time along each of `axes` (counted from the end): the axes where both their tile types have a size
    other than 1. numpy would broadcast an edge tile of size 1 against a full tile there, silently."""
    if not getattr(expr.function, "elementwise", False) or len(expr.args) < 2:
        return []
    tiles = [(n, tuple(getattr(a.type, "tile", None) or ())) for n, a in enumerate(expr.args)
             if getattr(a.type, "tile", None)]
    out = []
    for x in range(len(tiles)):
        for y in range(x + 1, len(tiles)):
            (i, a), (j, b) = tiles[x], tiles[y]
            axes = [-k for k in range(1, min(len(a), len(b)) + 1) if a[-k] != 1 and b[-k] != 1]
            if axes:
                out.append((i, j, axes))
    return out


def _checking(expr: bx.Call, lined_up: list, call: Callable[[list], Any]) -> Callable[[list], Any]:
    """`call`, after checking that its tile arguments line up where their types say they do."""
    def checked(values: list) -> Any:
        for i, j, axes in lined_up:
            a, b = np.shape(values[i]), np.shape(values[j])
            if any(len(a) >= -axis and len(b) >= -axis and a[axis] != b[axis] for axis in axes):
                raise DataError(f"{expr.function.label}: tiles of shapes {a} and {b} do not line up: an edge "
                                "tile met a full tile (the keys joined point to tiles of other sizes)",
                                hint="join the keys of the same tile positions, or store the tensors with a "
                                     "TILE that divides their SHAPE")
        return call(values)
    return checked


_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def _key_arith(expr: bx.KeyArith, backend: Backend) -> Compiled:
    op = bx.KEY_OPS[expr.op]
    left, right = compile_expr(expr.left, backend), compile_expr(expr.right, backend)

    def run(row: Row) -> Any:
        a, b = left(row), right(row)
        if a is None or b is None:
            return None
        try:
            value = op(int(a), int(b)) if isinstance(a, np.integer) or isinstance(b, np.integer) else op(a, b)
        except ZeroDivisionError:
            raise DataError(f"division by zero in key expression ({a} {expr.op} {b})") from None
        if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
            raise DataError(f"key expression ({a} {expr.op} {b}) = {value} is out of range for BIGINT")
        return value
    return run


def _compare(expr: bx.Compare, backend: Backend) -> Compiled:
    op = bx.COMPARE_OPS[expr.op]
    left, right = compile_expr(expr.left, backend), compile_expr(expr.right, backend)

    def run(row: Row) -> Any:
        a, b = left(row), right(row)
        return None if a is None or b is None else op(a, b)
    return run


def _truth_value(expr: bx.Bound, backend: Backend) -> Compiled:
    """A condition's SQL truth value: True, False, or None (unknown: it compared a NULL); a tensor condition
    is never unknown (tensors are never NULL)."""
    value = compile_expr(expr, backend)
    if hasattr(expr.type, "tile"):
        return lambda row: _truth(value(row))
    return lambda row: None if (found := value(row)) is None else bool(found)


def _logical(expr: bx.Logical, backend: Backend) -> Compiled:
    """AND / OR in SQL's three-valued logic: NULL AND FALSE is FALSE, NULL OR TRUE is TRUE, else unknown
    (None) where an argument is; the arguments are evaluated left to right until one decides."""
    args = [_truth_value(a, backend) for a in expr.args]
    deciding = expr.op != "AND"  # the value that decides: FALSE for AND, TRUE for OR

    def run(row: Row) -> Optional[bool]:
        result: Optional[bool] = not deciding
        for arg in args:
            value = arg(row)
            if value is deciding:
                return deciding
            if value is None:
                result = None
        return result
    return run


def _not(expr: bx.Not, backend: Backend) -> Compiled:
    """NOT of unknown is unknown (SQL): `NOT (x BETWEEN 1 AND 6)` keeps no tuple whose x is NULL."""
    arg = _truth_value(expr.arg, backend)
    return lambda row: None if (value := arg(row)) is None else not value


def _in_set(expr: bx.InSet, backend: Backend) -> Compiled:
    arg, negated = compile_expr(expr.arg, backend), expr.negated
    return lambda row: bx.in_set_truth(arg(row), expr.values, negated)


def _is_null(expr: bx.IsNullTest, backend: Backend) -> Compiled:
    arg, negated = compile_expr(expr.arg, backend), expr.negated
    return lambda row: (arg(row) is None) != negated


def _coalesce(expr: bx.Coalesce, backend: Backend) -> Compiled:
    args = [compile_expr(a, backend) for a in expr.args]

    def run(row: Row) -> Any:
        for arg in args:
            value = arg(row)
            if value is not None:
                return value
        return None
    return run


_COMPILERS = {bx.ColumnIndex: _column, bx.Const: _const, bx.Call: _call, bx.KeyArith: _key_arith,
              bx.Compare: _compare, bx.Logical: _logical, bx.Not: _not, bx.InSet: _in_set,
              bx.IsNullTest: _is_null, bx.Coalesce: _coalesce}
