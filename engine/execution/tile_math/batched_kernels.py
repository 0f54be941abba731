"""Kernels of many small tiles as one call on their stack, per-tile reductions too (SUMSQ, REDUCE_SUM along an axis).

tile_math/stacked_tiles.py evaluates elementwise kernels on a batch's tiles stacked along a new first
axis: broadcasting lines them up as it does the tiles. A per-tile reduction does not: `SUMSQ` of a stack
would add up the whole stack. Here each kernel knows where the tuples' axis is: a reduction of a tile
(SUMSQ, REDUCE_SUM / REDUCE_MAX / REDUCE_MEAN over all axes or along one) reduces the stack along the
tile's axes, shifted past the tuples' axis; SOFTMAX and LOG_SOFTMAX along a tile axis run along the same
axis of the stack; elementwise kernels take their arguments' stacks with axes of 1 put after the tuples'
axis where a tile has fewer dimensions (a 0-d SUMSQ beside a matrix tile), as a tuple's broadcasting
puts them in front. So `SUM(1 + SUMSQ(E.v))` or `SUM(REDUCE_SUM(SQUARE(E.v), 1))` over a million small
tiles is a few numpy calls, not a million kernel calls. Anything else (a product, a key inside a kernel,
an array constant other than a 0-d one) compiles to None, and the caller goes tuple by tuple.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from trdb.execution.tile_math.compile import LAYOUT_VIEWS, kernel_call
from trdb.execution.work import charge
from trdb.kernels.axis_reductions import summed_rows
from trdb.kernels.backend import Backend
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.plan import expressions as bx
from trdb.plan.types import TensorType

Stacked = tuple[Any, int]  # (a stack (n, *tile), or a scalar the same for every tuple; the tile's dimensions)
Batched = Callable[[tuple], Stacked]

_REDUCTIONS = {"REDUCE_SUM": np.sum, "REDUCE_MAX": np.max, "REDUCE_MEAN": np.mean}
_ALONG_AXIS = {"SOFTMAX", "LOG_SOFTMAX"}


def compile_batched(expr: bx.Bound, backend: Backend) -> Optional[Batched]:
    """A function from a row whose tile columns hold stacks `(n, *tile)` to the expression's stacked value and
    its tile's dimensions; None where some part of it has no stacked form."""
    if backend is not NUMPY_BACKEND:
        return None
    if isinstance(expr, bx.ColumnIndex):
        if not isinstance(expr.type, TensorType):
            return None
        index = expr.index
        return lambda row: (row[index], row[index].ndim - 1)
    if isinstance(expr, bx.Const):
        value = expr.value
        if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
            return lambda row: (value, -1)  # a folded CAST(2 AS float32): a scalar of its dtype, as in each tuple's call
        if not isinstance(value, (int, float, np.number)) or isinstance(value, bool):
            return None  # an array constant would broadcast against the tuples' axis
        return lambda row: (value, -1)
    if isinstance(expr, bx.Call) and isinstance(expr.type, TensorType):
        name = expr.function.name
        if name in LAYOUT_VIEWS:
            return _layout(expr, compile_batched(expr.args[0], backend), name)
        args = [compile_batched(arg, backend) for arg in expr.args]
        if any(arg is None for arg in args):
            return None
        if name == "SUMSQ":
            return _sumsq(args[0])
        if name in _REDUCTIONS or name in _ALONG_AXIS:
            return _along_axis(expr, args, name)
        if name == "MATMUL":
            return _matmul(*args)
        if getattr(expr.function, "elementwise", False):
            return _elementwise(kernel_call(expr, backend), args)
    return None


def _layout(expr: bx.Call, arg: Optional[Batched], name: str) -> Optional[Batched]:
    """RESHAPE or TRANSPOSE of each tile, by constants: the stack reshaped past, or its axes permuted after, the
    tuples' axis."""
    rest = expr.args[1:]
    if arg is None or not all(isinstance(a, bx.Const) for a in rest):
        return None
    values = [a.value for a in rest]
    shape = tuple(values[0]) if len(values) == 1 and isinstance(values[0], tuple) else tuple(values)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in shape):
        return None

    def run(row: tuple) -> Stacked:
        stack, ndim = arg(row)
        if ndim < 0:
            raise _NotStacked
        if name == "RESHAPE":
            return stack.reshape(len(stack), *shape), len(shape)
        axes = shape or tuple(reversed(range(ndim)))
        if sorted(a % ndim for a in axes) != list(range(ndim)) or len(axes) != ndim:
            raise _NotStacked  # the tuple's own call names what is wrong
        return stack.transpose(0, *(a % ndim + 1 for a in axes)), ndim
    return run


def _matmul(left: Batched, right: Batched) -> Batched:
    """MATMUL of matrix tiles, one batched product (numpy's matmul over the tuples' axis); see `stacked_product`."""
    def run(row: tuple) -> Stacked:
        (a, a_ndim), (b, b_ndim) = left(row), right(row)
        if a_ndim != 2 or b_ndim != 2 or a.shape[2] != b.shape[1]:
            raise _NotStacked  # vectors, constants or misfits: one by one (their errors are the tuples')
        with np.errstate(all="ignore"):
            out = stacked_product(a, b)
        charge(2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2], a.nbytes + b.nbytes + out.nbytes)
        return out, 2
    return run


def compile_product_sum(expr: bx.Bound, backend: Backend) -> Optional[Callable[[tuple], np.ndarray]]:
    """For MATMUL of matrix tiles: a function from a row of stacks to the sum of every tuple's product (one
    group's SUM), made without the products (`summed_product`); None where the operands have no stacked form."""
    if backend is not NUMPY_BACKEND or not isinstance(expr, bx.Call) or expr.function.name != "MATMUL" or \
            len(expr.args) != 2:
        return None
    left, right = (compile_batched(arg, backend) for arg in expr.args)
    if left is None or right is None:
        return None

    def run(row: tuple) -> np.ndarray:
        (a, a_ndim), (b, b_ndim) = left(row), right(row)
        if a_ndim != 2 or b_ndim != 2 or a.shape[2] != b.shape[1] or len(a) != len(b):
            raise _NotStacked
        with np.errstate(all="ignore"):
            out = summed_product(a, b)
        charge(2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2], a.nbytes + b.nbytes + out.nbytes)
        return out
    return run


def summed_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The sum over the tuples of each one's product, stacks `(n, m, k)` and `(n, k, p)`: one contraction over the
    tuples and the inner axis together (a GEMM), or, where one side is the same matrix for every tuple, the other
    side summed first (Xᵀ·G of a weight's gradient over 50,000 rows of 1 x 8: one GEMM, not 50,000 outer products
    then their sum: about 0.6 against 0.05 ms)."""
    if b.strides[0] == 0:
        return np.matmul(summed_rows(a), b[0])
    if a.strides[0] == 0:
        return np.matmul(a[0], summed_rows(b))
    return np.tensordot(a, b, axes=([0, 2], [0, 1]))


def stacked_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The product of each tuple's matrices, stacks `(n, m, k)` and `(n, k, p)`: numpy's batched matmul loops
    over the tuples, a call each, so where one side is the same matrix for every tuple (a broadcast view: the
    one tile of a weight joined to every row) it is one GEMM over the other's rows (n = 4,096 rows of 1 x 8
    times an 8 x 1 weight: 5 against 53 us; of 1 x 64 times 64 x 64: 151 against 728 us), and where the inner
    dimension is 1 (a row's outer product, Xᵀ·g of a gradient) an elementwise product (as the MATMUL kernel)."""
    n, m, k = a.shape
    p = b.shape[2]
    if k == 1:
        return np.multiply(a, b)  # (n, m, 1) * (n, 1, p)
    if b.strides[0] == 0 and n > 1:
        return np.matmul(a.reshape(n * m, k), b[0]).reshape(n, m, p)
    if a.strides[0] == 0 and n > 1 and p == 1:  # a matrix times each tuple's column: the columns side by side
        return np.matmul(a[0], b.reshape(n, k).T).T.reshape(n, m, 1)
    return np.matmul(a, b)


def _sumsq(arg: Batched) -> Batched:
    def run(row: tuple) -> Stacked:
        stack, ndim = arg(row)
        if ndim < 0 or stack.dtype.kind != "f":
            raise _NotStacked  # integers: the kernel's sum of squares widens them, one tile at a time
        flat = stack.reshape(len(stack), -1)
        charge(2 * flat.size, flat.nbytes)  # as the kernel's own calls would count
        with np.errstate(all="ignore"):  # inf / nan as the kernel gives them, without warnings
            return np.einsum("ij,ij->i", flat, flat), 0
    return run


def _along_axis(expr: bx.Call, args: list[Batched], name: str) -> Optional[Batched]:
    """REDUCE_* over all tile axes or along one, SOFTMAX / LOG_SOFTMAX along one (a constant axis)."""
    if len(expr.args) == 2 and not (isinstance(expr.args[1], bx.Const) and isinstance(expr.args[1].value, int)):
        return None
    axis = expr.args[1].value if len(expr.args) == 2 else (-1 if name in _ALONG_AXIS else None)
    arg = args[0]

    def run(row: tuple) -> Stacked:
        stack, ndim = arg(row)
        if ndim < 1 or (axis is not None and not -ndim <= axis < ndim):
            raise _NotStacked  # a 0-d tile, or an axis it has not: the tuple's own call says what is wrong
        charge(stack.size, stack.nbytes)
        if name in _ALONG_AXIS:
            return expr.function.call(NUMPY_BACKEND, [stack, axis % ndim + 1]), ndim
        with np.errstate(all="ignore"):
            if axis is None:
                return _REDUCTIONS[name](stack.reshape(len(stack), -1), axis=1), 0
            return _REDUCTIONS[name](stack, axis=axis % ndim + 1), ndim - 1
    return run


def _elementwise(call: Callable[[list], Any], args: list[Batched]) -> Batched:
    def run(row: tuple) -> Stacked:
        values = [arg(row) for arg in args]
        ndim = max(d for _, d in values)
        if ndim < 0:
            raise _NotStacked  # constants only: nothing per tuple
        stacks = [aligned(value, d, ndim) for value, d in values]
        return call(stacks), ndim
    return run


def aligned(value: Any, ndim: int, target: int) -> Any:
    """A stack of tiles of `ndim` dimensions with axes of 1 after the tuples' axis, up to `target` dimensions."""
    if ndim < 0 or ndim == target:
        return value
    return value.reshape(len(value), *(1,) * (target - ndim), *value.shape[1:])


class _NotStacked(Exception):
    """The stacked evaluation does not apply to these tiles: they go tuple by tuple."""
