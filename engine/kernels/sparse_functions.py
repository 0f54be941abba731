"""Per-tile kernels for CSR operands: the sparse versions of the kernels that keep zeros as zeros.

The registry (catalog/functions.py) pairs a kernel with one of these; a call with a CSR argument
runs it, and a kernel without one sees its CSR arguments densified. Each function takes the same
arguments as its dense twin, never writes into them, gives the dtype numpy would give on the dense
tiles, and falls back to the dense kernel where zeros would not stay zeros (`+ 1`, a CSR operand
that is broadcast, division by a tile). Known difference: `*` by a tile holding inf or NaN keeps
the CSR operand's zeros as zeros (as scipy.sparse does), where dense arithmetic gives NaN.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import numpy as np

from trdb.kernels import functions as K
from trdb.kernels.sparse import add_into, dense, empty_csr, is_sparse, make_csr, row_indices, settle, sparse_module


def densified(kernel: Callable) -> Callable:
    """The dense kernel, run on dense copies of its CSR arguments."""
    return lambda xp, *args: kernel(xp, *[dense(a) for a in args])


def _scalar(value: Any) -> bool:
    return not is_sparse(value) and getattr(value, "ndim", 0) == 0


def _with_values(tile: Any, values: Any) -> Any:
    """A CSR tile with `tile`'s pattern and new stored values (the index arrays are shared, never written)."""
    return make_csr(values, tile.indices, tile.indptr, tuple(tile.shape), sparse_module(tile))


def _map(dense_kernel: Callable, values: Callable) -> Callable:
    """A unary kernel that maps zero to zero: applied to the stored values only."""
    def run(xp, a):
        return _with_values(a, values(xp, a.data)) if is_sparse(a) else dense_kernel(xp, a)
    return run


negative = _map(K.negative, lambda xp, v: xp.negative(v))
relu = _map(K.relu, lambda xp, v: xp.maximum(v, 0))
tanh = _map(K.tanh, lambda xp, v: xp.tanh(v))
sqrt = _map(K.sqrt, lambda xp, v: xp.sqrt(v))
absolute = _map(K.absolute, lambda xp, v: xp.abs(v))
square = _map(K.square, lambda xp, v: xp.square(v))


def cast(xp, a, dtype):
    if is_sparse(a) and np.dtype(dtype) != np.float16:  # scipy.sparse has no float16
        return a.astype(dtype)
    return K.cast(xp, dense(a), dtype)


def zeros_like(xp, a):
    return empty_csr(tuple(a.shape), a.dtype, like=a) if is_sparse(a) else K.zeros_like(xp, a)


# ---- binary elementwise --------------------------------------------------------------------------

def _gathered(xp, tile: Any, other: Any) -> Any:
    """The values of a dense `other` at the stored positions of a CSR tile (other broadcast to its shape)."""
    return xp.broadcast_to(other, tuple(tile.shape))[row_indices(tile), tile.indices]


def _sparse_shaped(sparse_tile: Any, other: Any) -> bool:
    """Whether the result of an elementwise op has the CSR operand's shape (it is not broadcast)."""
    shape = tuple(sparse_tile.shape)
    return np.broadcast_shapes(shape, tuple(getattr(other, "shape", ()))) == shape


def multiply(xp, a, b):
    if is_sparse(a) and is_sparse(b):
        return a.multiply(b).tocsr() if a.shape == b.shape else K.multiply(xp, dense(a), dense(b))
    tile, other = (a, b) if is_sparse(a) else (b, a)
    if _scalar(other):
        return _with_values(tile, xp.multiply(tile.data, other))
    if _sparse_shaped(tile, other):
        return _with_values(tile, xp.multiply(tile.data, _gathered(xp, tile, other)))
    return K.multiply(xp, dense(a), dense(b))


def divide(xp, a, b):
    if is_sparse(a) and _scalar(b) and _nonzero_number(b):
        return _with_values(a, xp.true_divide(a.data, b))
    return K.divide(xp, dense(a), dense(b))


def _nonzero_number(value: Any) -> bool:
    number = complex(value)
    return number != 0 and number == number  # NaN / x is NaN everywhere, and x / 0 is inf or NaN


def add(xp, a, b):
    return _sum(xp, a, b, negate_b=False)


def subtract(xp, a, b):
    return _sum(xp, a, b, negate_b=True)


def _sum(xp, a, b, negate_b: bool):
    if is_sparse(a) and is_sparse(b) and a.shape == b.shape:
        return settle((a - b if negate_b else a + b).tocsr())
    dense_kernel = K.subtract if negate_b else K.add
    tile, other = (a, b) if is_sparse(a) else (b, a)
    if _scalar(other) or is_sparse(other) or not _sparse_shaped(tile, other):
        return dense_kernel(xp, dense(a), dense(b))
    # dense ± CSR: a dense result, written once and the stored values added into it
    out = xp.empty(tuple(tile.shape), dtype=xp.result_type(a.dtype, b.dtype))
    if tile is a:
        out[...] = xp.negative(b) if negate_b else b
        return add_into(out, a)
    out[...] = a
    return add_into(out, _with_values(b, xp.negative(b.data)) if negate_b else b)


def _extreme(dense_kernel: Callable, keeps_zero: Callable[[Any], bool], both: str) -> Callable:
    """GREATEST / LEAST: CSR with a scalar that leaves zeros alone, or of two CSR tiles of one shape."""
    def run(xp, a, b):
        if is_sparse(a) and is_sparse(b) and a.shape == b.shape:
            return getattr(a, both)(b).tocsr()
        tile, other = (a, b) if is_sparse(a) else (b, a)
        if _scalar(other) and keeps_zero(other):
            return _with_values(tile, dense_kernel(xp, tile.data, other))
        return dense_kernel(xp, dense(a), dense(b))
    return run


greatest = _extreme(K.greatest, lambda s: s <= 0, "maximum")
least = _extreme(K.least, lambda s: s >= 0, "minimum")


def power(xp, a, p):
    if is_sparse(a) and _scalar(p) and p > 0:
        return _with_values(a, xp.power(a.data, p))
    return K.power(xp, dense(a), dense(p))


# ---- reductions ----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=64)
def _reduced_dtype(name: str, dtype: np.dtype) -> np.dtype:
    """The dtype numpy's sum / mean give for a tile of `dtype` (int32 sums are int64, int means float64)."""
    return getattr(np, name)(np.zeros(1, dtype=dtype)).dtype


def _without(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    axis = axis % len(shape)
    return shape[:axis] + shape[axis + 1:]


def reduce_sum(xp, a, axis=None):
    if not is_sparse(a):
        return K.reduce_sum(xp, a, axis)
    dtype = _reduced_dtype("sum", a.dtype)
    if axis is None:
        return xp.asarray(xp.sum(a.data), dtype=dtype)
    return xp.asarray(a.sum(axis=axis), dtype=dtype).reshape(_without(tuple(a.shape), axis))


def reduce_max(xp, a, axis=None):
    if not is_sparse(a):
        return K.reduce_max(xp, a, axis)
    if axis is None:
        return xp.asarray(a.max(), dtype=a.dtype)
    return xp.asarray(dense(a.max(axis=axis)), dtype=a.dtype).reshape(_without(tuple(a.shape), axis))


def reduce_mean(xp, a, axis=None):
    if not is_sparse(a):
        return K.reduce_mean(xp, a, axis)
    count = a.shape[0] * a.shape[1] if axis is None else a.shape[axis % 2]
    total = reduce_sum(xp, a.astype(_reduced_dtype("mean", a.dtype)), axis)
    return xp.asarray(total / count, dtype=_reduced_dtype("mean", a.dtype))


def sumsq(xp, a):
    if not is_sparse(a):
        return K.sumsq(xp, a)
    values = a.data
    if values.dtype.kind == "f" and values.dtype.itemsize >= 4:
        return xp.dot(values, values)
    return xp.sum(values * values)


# ---- layout and contractions ---------------------------------------------------------------------

def transpose(xp, a, *axes):
    if not is_sparse(a):
        return K.transpose(xp, a, *axes)
    if axes and [axis % 2 for axis in axes] == [0, 1]:
        return a
    return a.T.tocsr()


def matmul(xp, a, b):
    if not (is_sparse(a) or is_sparse(b)) or max(a.ndim, b.ndim) > 2:
        return K.matmul(xp, dense(a), dense(b))
    if is_sparse(a) and is_sparse(b):
        return settle((a @ b).tocsr())
    if is_sparse(a):
        return a @ b  # scipy's CSR x dense kernel: a dense result
    return (b.T @ a.T).T  # dense x CSR as (CSR^T x dense^T)^T: the same kernel, on the CSC transpose


def einsum(xp, spec: str, *operands):
    """Two-letter EINSUM specs on CSR tiles: a transpose, a sum, a matrix product (operands and result
    in either orientation) or an elementwise product; any other spec densifies."""
    if not any(is_sparse(o) for o in operands) or not all(getattr(o, "ndim", 0) == 2 for o in operands):
        return K.einsum(xp, spec, *[dense(o) for o in operands])
    spec = K.plain_spec(spec, tuple(o.shape for o in operands))
    plan = _einsum_plan(spec, len(operands))
    if plan is None:
        return K.einsum(xp, spec, *[dense(o) for o in operands])
    kind, flips, flip_out = plan
    # a transposed CSR tile is CSC: fine for `@`, made CSR again where the kernel reads its pattern
    args = [(o.T if kind == "matmul" or not is_sparse(o) else o.T.tocsr()) if flip else o
            for o, flip in zip(operands, flips)]
    dtype = xp.result_type(*[o.dtype for o in operands])
    if kind == "matmul":
        out = matmul(xp, *args)
    elif kind == "multiply":
        out = multiply(xp, *args)
    elif kind == "copy":
        out = args[0]
    else:  # "sum" with the axis to sum over (None: all)
        out = xp.asarray(args[0].sum() if flip_out is None else args[0].sum(axis=flip_out), dtype=dtype)
        return out.reshape(-1) if out.ndim else out
    out = (out.T.tocsr() if is_sparse(out) else out.T) if flip_out else out
    return out if out.dtype == dtype else out.astype(dtype)


@functools.lru_cache(maxsize=256)
def _einsum_plan(spec: str, count: int) -> Optional[tuple]:
    """(kind, transpose each operand?, transpose the result? / the axis summed) for the specs handled."""
    if "->" not in spec:
        return None
    inputs, output = spec.split("->")
    terms = inputs.split(",")
    if len(terms) != count or any(len(t) != 2 or t[0] == t[1] for t in terms) or len(set(output)) != len(output):
        return None
    if count == 1:
        (term,) = terms
        if len(output) == 2 and set(output) == set(term):
            return "copy", (False,), output != term
        if len(output) < 2 and set(output) <= set(term):
            return "sum", (False,), (None if not output else 1 - term.index(output))
        return None
    if count != 2:
        return None
    first, second = terms
    if set(first) == set(second) and set(output) == set(first):  # elementwise
        return "multiply", (False, first != second), output != first
    shared = set(first) & set(second)
    if len(shared) != 1 or shared & set(output) or set(output) != set(first + second) - shared:
        return None
    (index,) = shared
    flips = (first[1] != index, second[0] != index)
    return "matmul", flips, output != first.replace(index, "") + second.replace(index, "")
