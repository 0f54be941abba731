"""Per-tile kernel implementations, written once against an array module `xp` (numpy or cupy).

Every function is pure: it never writes into its arguments (tiles in the buffer pool are shared
and read-only). Arguments are arrays of `xp` or Python scalars; scalars stay Python scalars so
that numpy 2 treats them as weak for dtype promotion (float32 tile * 2.5 stays float32).
"""
from __future__ import annotations

import functools
from typing import Any, Optional

import numpy as np
import opt_einsum

from trdb.kernels import batched_einsum, einsum_spec
from trdb.kernels.axis_reductions import axis_max, axis_mean, axis_sum

# ---- elementwise operators -------------------------------------------------------------------

def add(xp, a, b):
    return xp.add(a, b)


def subtract(xp, a, b):
    return xp.subtract(a, b)


def multiply(xp, a, b):
    return xp.multiply(a, b)


def divide(xp, a, b):
    return xp.true_divide(a, b)


def floor_divide(xp, a, b):
    return xp.floor_divide(a, b)


def remainder(xp, a, b):
    return xp.remainder(a, b)


def negative(xp, a):
    return xp.negative(a)


def equal(xp, a, b):
    return xp.equal(a, b)


def not_equal(xp, a, b):
    return xp.not_equal(a, b)


def less(xp, a, b):
    return xp.less(a, b)


def less_equal(xp, a, b):
    return xp.less_equal(a, b)


def greater(xp, a, b):
    return xp.greater(a, b)


def greater_equal(xp, a, b):
    return xp.greater_equal(a, b)


# ---- elementwise functions -------------------------------------------------------------------

def relu(xp, a):
    return xp.maximum(a, 0)


def sigmoid(xp, a):
    # 1 / (1 + e) for a >= 0 and e / (1 + e) for a < 0, with e = exp(-|a|) in (0, 1]: no exp() argument
    # is positive, so nothing overflows, and tiny results keep their relative precision. The numerator
    # is max(e, a >= 0), which is 1 or e (xp.where over a random mask costs 3x more than an exp; one exp,
    # not two: 460 against 670 us for 256 x 1536 float32, the same bits).
    e = xp.exp(-xp.abs(a))
    numerator = xp.maximum(e, a >= 0)
    e += 1
    numerator /= e
    return numerator


def tanh(xp, a):
    return xp.tanh(a)


def exp(xp, a):
    return xp.exp(a)


def log(xp, a):
    return xp.log(a)


def sqrt(xp, a):
    return xp.sqrt(a)


def absolute(xp, a):
    return xp.abs(a)


def square(xp, a):
    return xp.square(a)


def power(xp, a, p):
    return xp.power(a, p)


def greatest(xp, a, b):
    return xp.maximum(a, b)


def least(xp, a, b):
    return xp.minimum(a, b)


def zeros_like(xp, a):
    return xp.zeros_like(a)


def ones_like(xp, a):
    return xp.ones_like(a)


def bce_with_logits(xp, logits, labels):
    # max(x, 0) - x*y + log(1 + exp(-|x|)): the exp argument is never positive, so no overflow.
    x = logits
    return xp.maximum(x, 0) - x * labels + xp.log1p(xp.exp(-xp.abs(x)))


def cast(xp, a, dtype):
    return xp.asarray(a, dtype=dtype)


# ---- axis functions and reductions -----------------------------------------------------------

def softmax(xp, a, axis=-1):
    # Subtracting the maximum keeps exp() at or below 1; the result is unchanged mathematically.
    shifted = a - axis_max(xp, a, axis, keepdims=True)
    e = xp.exp(shifted)
    return e / axis_sum(xp, e, axis, keepdims=True)


def log_softmax(xp, a, axis=-1):
    # x - max - log(sum(exp(x - max))): exp() never overflows and a tiny probability keeps its log
    # (LOG(SOFTMAX(x)) rounds it to 0 and returns -inf).
    shifted = a - axis_max(xp, a, axis, keepdims=True)
    return shifted - xp.log(axis_sum(xp, xp.exp(shifted), axis, keepdims=True))


def cross_entropy(xp, logits, target, axis=-1):
    """-sum(target * log_softmax(logits)) along `axis`, one value per row (the logits' shape without `axis`):
    the target is one-hot rows or probabilities of the logits' shape, or integer class labels of the rows'."""
    log_p = log_softmax(xp, logits, axis)
    if target.ndim == log_p.ndim:
        return -axis_sum(xp, target * log_p, axis)
    picked = xp.take_along_axis(log_p, class_indices(xp, target, log_p.shape[axis], axis), axis=axis)
    return -xp.squeeze(picked, axis=axis)


def class_indices(xp, labels, classes: int, axis: int):
    """Integer class labels as indices along the logits' `axis` (a size-1 axis there); ValueError for labels
    that are not integers or not in 0..classes-1 (numpy would raise IndexError, CuPy wrap silently)."""
    labels = xp.asarray(labels)
    if labels.dtype.kind not in "iu":
        raise ValueError(f"class labels must be integers, got {labels.dtype}")
    if labels.size and (int(labels.min()) < 0 or int(labels.max()) >= classes):
        raise ValueError(f"a class label is outside 0..{classes - 1} (labels {int(labels.min())} to "
                         f"{int(labels.max())} for {classes} classes)")
    return xp.expand_dims(labels, axis)


def one_hot_like(xp, labels, like, axis: int):
    """Integer class labels as one-hot rows of `like`'s shape and dtype, the classes along `axis`."""
    index = class_indices(xp, labels, like.shape[axis], axis)
    classes = [1] * like.ndim
    classes[axis] = like.shape[axis]
    return (xp.arange(like.shape[axis]).reshape(classes) == index).astype(like.dtype)


def argmax(xp, a, axis=None):
    # int64 whatever the platform's intp, as numpy's and PyTorch's users read indices
    return xp.asarray(xp.argmax(a, axis=axis)).astype(np.int64)


def reshape(xp, a, *shape):
    """RESHAPE(a, (d0, d1, ...)) or RESHAPE(a, d0, d1, ...); one -1 is inferred, as in numpy."""
    if len(shape) == 1 and isinstance(shape[0], tuple):
        shape = shape[0]
    return xp.reshape(a, tuple(shape))


def reduce_sum(xp, a, axis=None):
    return axis_sum(xp, xp.asarray(a), axis)


def reduce_max(xp, a, axis=None):
    return axis_max(xp, xp.asarray(a), axis)


def reduce_mean(xp, a, axis=None):
    return axis_mean(xp, xp.asarray(a), axis)


def sumsq(xp, a):
    a = xp.asarray(a)
    if a.dtype.kind == "f" and a.dtype.itemsize >= 4:
        # One BLAS dot pass instead of a squared temporary the size of the tile.
        flat = xp.ravel(a)
        return xp.dot(flat, flat)
    return xp.sum(a * a)


def transpose(xp, a, *axes):
    return xp.transpose(a, axes or None)


# ---- contractions ----------------------------------------------------------------------------

def matmul(xp, a, b, out=None):
    """a @ b, written into `out` when given (a result's place: execution/result_canvas.py)."""
    if getattr(a, "ndim", 0) == 2 and getattr(b, "ndim", 0) == 2 and a.shape[1] == 1 and b.shape[0] == 1:
        # an outer product (inner dimension 1): one multiplication per element, as BLAS would do it, but
        # broadcast (a 2048 x 1024 float32 result: 2.5 ms against GEMM's 4.6 ms, one thread)
        return xp.multiply(a, b, out=out)
    if xp is np and _tall_transposed_times_narrow(a, b):
        # Xᵀ·G of a gradient (a transposed view times a few columns): OpenBLAS computes (Gᵀ·X)ᵀ faster
        # (Cora's 1433 x 2708 x 16 float32: 2.9 against 3.8 ms at one thread, 1.3 against 1.8 ms at two)
        return np.matmul(b.T, a.T, out=None if out is None else out.T).T
    return xp.matmul(a, b, out=out)


def _tall_transposed_times_narrow(a, b) -> bool:
    """`a` a transposed view (Fortran order) of at least 16 times as many rows as `b` (in C order) has columns
    (at 8 times, 512 x 256 x 64, the swap was 1.00x at one BLAS thread and 1.09x at two)."""
    return (type(a) is np.ndarray and type(b) is np.ndarray and a.ndim == 2 and b.ndim == 2
            and a.flags.f_contiguous and not a.flags.c_contiguous and b.flags.c_contiguous
            and a.shape[0] >= 16 * b.shape[1] and a.shape[0] * b.shape[1] >= 4096)


def einsum(xp, spec: str, *operands: Any):
    arrays = operands
    if not all(hasattr(op, "dtype") for op in operands):
        # A Python scalar operand becomes a 0-d array of the dtype it would promote to, so that it
        # stays weak (a float32 contraction times 2.0 remains float32).
        dtype = xp.result_type(*operands) if any(hasattr(op, "dtype") for op in operands) else None
        arrays = [op if hasattr(op, "dtype") else xp.asarray(op, dtype=dtype) for op in operands]
    spec = einsum_spec.resolve_for_arrays(spec, tuple(a.shape for a in arrays)).spec
    if xp is not np and any(a.ndim == 0 for a in arrays):
        return _scalars_apart(xp, spec, arrays)
    plan = _tensordot_plan(spec) if len(arrays) == 2 else None
    if plan is not None:
        return _tensordot(xp, arrays, *plan)
    if len(arrays) == 2 and (batched := batched_einsum.blas_einsum(xp, spec, *arrays)) is not None:
        return batched  # batch letters: one batched GEMM, not numpy's plain einsum loop
    steps = _pairwise_steps(spec, tuple(a.shape for a in arrays)) if len(arrays) > 2 else None
    if steps is not None:
        return _stepwise(xp, arrays, steps)
    expression = _contraction(spec, tuple(a.shape for a in arrays))
    return expression(*arrays)


def _scalars_apart(xp, spec: str, arrays) -> Any:
    """The contraction of the operands that have axes, times the 0-d ones: CuPy's einsum refuses a 0-d
    operand beside others ("An input is zero-dim while axes has dimensions"), numpy's takes it."""
    inputs, output = spec.split("->")
    kept = [(a, term) for a, term in zip(arrays, inputs.split(",")) if a.ndim > 0]
    scalars = [a for a in arrays if a.ndim == 0]
    result = einsum(xp, ",".join(t for _, t in kept) + "->" + output, *(a for a, _ in kept)) if kept else scalars.pop()
    for scalar in scalars:
        result = xp.multiply(result, scalar)
    return result


def _stepwise(xp, arrays, steps: tuple):
    """opt_einsum's path run step by step, each pair of operands as a two-operand EINSUM (a matrix
    product where it is one: matmul of views, where opt_einsum's tensordot copied a transposed result)."""
    operands = list(arrays)
    for positions, step, plan in steps:
        taken = [operands.pop(p) for p in positions]  # in opt_einsum's order: the step's spec names them so
        whole = plan is not None and all(t.ndim for t in taken)  # a 0-d operand (a step's full sum): einsum
        operands.append(_tensordot(xp, taken, *plan) if whole else einsum(xp, step, *taken))
    (result,) = operands
    return result


@functools.lru_cache(maxsize=1024)
def _pairwise_steps(spec: str, shapes: tuple[tuple[int, ...], ...]) -> Optional[tuple]:
    """opt_einsum's path as (operand positions, that step's spec, its tensordot plan or None) triples,
    each of two operands; None when a step is not (a letter summed within one operand): opt_einsum runs
    the whole spec then. Steps have tensordot plans (made once here) unless a letter is broadcast (of
    size 1 in one operand only): those steps run as EINSUMs of their own."""
    _, info = opt_einsum.contract_path(spec, *shapes, shapes=True)
    inputs, output = spec.split("->")
    terms, steps = inputs.split(","), []
    sizes = {(c, n) for term, shape in zip(terms, shapes) for c, n in zip(term, shape)}
    broadcast = len(sizes) != len({c for c, _ in sizes})
    for positions, _, step, *_ in info.contraction_list:  # positions descending, as opt_einsum pops them
        if len(positions) != 2:
            return None
        first, second = (terms.pop(p) for p in positions)
        kept = step.split("->")[1]
        letters = output if not terms else _row_major_order(first, second, kept)
        step = f"{first},{second}->{letters}"
        steps.append((tuple(positions), step, None if broadcast else _tensordot_plan(step)))
        terms.append(letters)
    return tuple(steps)


def _row_major_order(first: str, second: str, kept: str) -> str:
    """The letter order of an intermediate (free: only later steps read it) that BLAS computes from
    row-major operands as they are: `x @ y` where x ends and y starts with the letters summed."""
    for x, y in ((first, second), (second, first)):
        summed = [c for c in x if c in y and c not in kept]
        if x.endswith("".join(summed)) and y.startswith("".join(summed)):
            return "".join(dict.fromkeys(c for c in x + y if c in kept))
    return "".join(dict.fromkeys(c for c in first + second if c in kept))


def plain_spec(spec: str, shapes: tuple) -> str:
    """numpy's spec ('...', spaces, implicit output, size-1 broadcasting) as letters, ',' and '->' for
    these shapes; the binder checked it, so an error here is a tile whose shape the binder did not see."""
    return einsum_spec.resolve(spec, shapes).spec


def product_operands(spec: str, a, b) -> Optional[tuple]:
    """(left, right) whose `left @ right` is EINSUM(spec, a, b), when that is a product of 2-d matrices
    (transposed views where a letter order asks: BLAS reads them in place); else None."""
    if getattr(a, "ndim", 0) != 2 or getattr(b, "ndim", 0) != 2:
        return None
    plan = _tensordot_plan(einsum_spec.resolve_for_arrays(spec, (a.shape, b.shape)).spec)
    return _matrix_operands((a, b), *plan) if plan is not None else None


def _matrix_operands(arrays, swap: bool, axes: tuple, order: tuple) -> Optional[tuple]:
    first, second = arrays[::-1] if swap else arrays
    if first.ndim != 2 or second.ndim != 2 or len(axes[0]) != 1 or order:
        return None
    return (first if axes[0][0] == 1 else first.T), (second if axes[1][0] == 0 else second.T)


def _tensordot(xp, arrays, swap: bool, axes: tuple, order: tuple):
    matrices = _matrix_operands(arrays, swap, axes, order)
    if matrices is not None:
        return xp.matmul(*matrices)  # a matrix product: matmul of (transposed) views
    first, second = arrays[::-1] if swap else arrays
    result = xp.tensordot(first, second, axes=axes)
    return xp.transpose(result, order) if order else result


@functools.lru_cache(maxsize=1024)
def _tensordot_plan(spec: str):
    """How to run a two-operand contraction as one BLAS tensordot with a row-major result, or None.

    tensordot lays out the first operand's kept indices, then the second's; the operands are taken
    in the order that makes that the output's order, so the tile comes out contiguous (opt_einsum
    may pick the other order and return a transposed view, which every later copy walks column by
    column). None when the spec is not a plain contraction (batch, repeated or summed-away indices).
    """
    if "->" not in spec or not spec.replace(",", "").replace("->", "").isalpha():
        return None  # not a plain spec (plain_spec makes them so): opt_einsum reads it
    inputs, output = spec.split("->")
    operands = inputs.split(",")
    letters = "".join(operands)
    if any(operand.count(c) > 1 for operand in operands for c in operand) or len(set(output)) != len(output):
        return None
    if any(c in operands[0] and c in operands[1] and c in output for c in letters):
        return None  # a batch index
    if any(letters.count(c) == 1 and c not in output for c in letters):
        return None  # an index summed within one operand
    for swap in (False, True):
        first, second = operands[::-1] if swap else operands
        shared = [c for c in first if c in second]
        kept = [c for c in first if c not in shared] + [c for c in second if c not in shared]
        axes = ([first.index(c) for c in shared], [second.index(c) for c in shared])
        if kept == list(output) or swap:
            order = () if kept == list(output) else tuple(kept.index(c) for c in output)
            return swap, axes, order
    return None


@functools.lru_cache(maxsize=1024)
def _contraction(spec: str, shapes: tuple[tuple[int, ...], ...]):
    # Finding the contraction path costs tens of microseconds; every tile of a query has the same
    # few shapes, so the path is found once per shape. The expression picks numpy or cupy per call.
    return opt_einsum.contract_expression(spec, *shapes)
