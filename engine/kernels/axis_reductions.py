"""SUM, MAX and MEAN along one axis, fast on numpy where that axis is the last, short one of many rows.

numpy reduces a C-ordered array along its last axis row by row, each in its own short inner loop: for a
(2708, 7) float32 array (a graph's class logits) `max(axis=1)` takes about 110 us and `sum(axis=1)` about
50 us, where the same reduction over the transposed copy (the classes first, each a contiguous run of rows)
takes about 8 us, the copy included. A softmax, log-softmax or cross-entropy over a few classes does two
such reductions (a (2708, 7) log-softmax: 234 against 49 us). Where the axis is long (attention's rows of
256), or the rows are few, numpy's own loop is kept, as it is for float16 (whose row sums numpy accumulates
in float32: the moved copy would add in float16). Results are those of numpy's functions on the same values
(their dtype rules, NaN propagation), summed in another order.
"""
from __future__ import annotations

import numpy as np

SHORT_AXIS = 32  # the longest last axis moved first: at 40 classes of 169,343 rows both ways cost the same
MIN_ROWS = 64    # fewer rows: the copy costs about what it saves


def axis_sum(xp, a, axis, keepdims: bool = False):
    return _reduced(xp, xp.sum, a, axis, keepdims)


def axis_max(xp, a, axis, keepdims: bool = False):
    return _reduced(xp, xp.max, a, axis, keepdims)


def axis_mean(xp, a, axis, keepdims: bool = False):
    return _reduced(xp, xp.mean, a, axis, keepdims)


def _reduced(xp, reduce, a, axis, keepdims: bool):
    if xp is np and _short_last_axis(a, axis):
        out = reduce(np.ascontiguousarray(np.moveaxis(a, -1, 0)), axis=0)
        return np.expand_dims(out, -1) if keepdims else out
    return reduce(a, axis=axis, keepdims=keepdims)


def _short_last_axis(a, axis) -> bool:
    return (type(a) is np.ndarray and a.ndim >= 2 and type(axis) is int and axis in (-1, a.ndim - 1)
            and 1 < a.shape[-1] <= SHORT_AXIS and a.size >= MIN_ROWS * a.shape[-1] and a.dtype in _MOVED)


_MOVED = {np.dtype(t) for t in (np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8,
                                np.uint16, np.uint32, np.uint64, np.bool_)}


def summed_rows(stack: np.ndarray) -> np.ndarray:
    """The sum of a stack `(n, ...)` along its first axis: for floats one product with a row of ones (BLAS),
    numpy 2.4 adding rows one by one along that axis (50,000 x 8 float32: 1.2 ms, its reduceat 0.22 ms, the
    product 0.09 ms; 8,000 x 64 x 64: 12.7 against 3.2 ms); numpy's sum for other dtypes."""
    if type(stack) is not np.ndarray or stack.dtype not in _BLAS_SUMMED or stack.ndim < 2 or not len(stack):
        return stack.sum(axis=0)
    flat = stack.reshape(len(stack), -1)
    return np.matmul(np.ones(len(stack), dtype=stack.dtype), flat).reshape(stack.shape[1:])


_BLAS_SUMMED = {np.dtype(np.float32), np.dtype(np.float64)}


def column_bounds(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`keys.min(axis=0)` and `keys.max(axis=0)` of an (n, m) array of a few columns (key rows), column by column:
    numpy 2.4 takes about 60 us for 4,096 rows of two int64 columns, against 5 us so."""
    low = np.array([keys[:, c].min() for c in range(keys.shape[1])], dtype=keys.dtype)
    high = np.array([keys[:, c].max() for c in range(keys.shape[1])], dtype=keys.dtype)
    return low, high


def any_in_rows(mask: np.ndarray) -> np.ndarray:
    """`mask.any(axis=1)` of an (n, m) bool array with few columns (key rows, tile shapes), column by column:
    for 200,000 rows of 2, 0.24 against 2.8 ms. A row of no column is False, as numpy's."""
    out = np.zeros(len(mask), dtype=bool)
    for column in range(mask.shape[1]):
        out |= mask[:, column]
    return out


def all_in_rows(mask: np.ndarray) -> np.ndarray:
    """`mask.all(axis=1)` of an (n, m) bool array with few columns, column by column (`any_in_rows`). A row of
    no column is True, as numpy's."""
    out = np.ones(len(mask), dtype=bool)
    for column in range(mask.shape[1]):
        out &= mask[:, column]
    return out
