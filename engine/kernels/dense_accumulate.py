"""target += a @ b for dense float tiles in one BLAS GEMM call (beta = 1), without a product tile.

A tiled product sums, for each output tile, one product per contracted tile; computing each product
into a new tile and adding it to the sum writes and re-reads every output tile once more per
contracted tile (n = 2048 in 512 tiles: 48 extra passes over a 1 MB tile). GEMM accumulates into
its output for free. The row-major target is handed to Fortran BLAS as its transpose (target.T is
column-major): target.T += b.T @ a.T, each operand passed as is, or transposed by flag, so that no
operand is copied (a transposed view, as the backward pass's TRANSPOSE(X) makes, is read in place).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
from scipy.linalg import blas

_GEMM = {np.dtype(np.float32): blas.sgemm, np.dtype(np.float64): blas.dgemm}


def gemm_add_into(target: Any, a: Any, b: Any) -> bool:
    """target += a @ b in place for 2-D numpy arrays of one float dtype; False, doing nothing, where
    it cannot or should not (other dtypes or shapes, a vector result, a target that is not an owned
    row-major array, an operand that is neither row- nor column-major)."""
    gemm = _GEMM.get(getattr(target, "dtype", None))
    if gemm is None or not all(isinstance(x, np.ndarray) for x in (target, a, b)):
        return False
    if a.dtype != target.dtype or b.dtype != target.dtype or a.ndim != 2 or b.ndim != 2 or target.ndim != 2:
        return False
    if a.shape[1] != b.shape[0] or target.shape != (a.shape[0], b.shape[1]) or 0 in a.shape + b.shape:
        return False
    if 1 in target.shape:
        return False  # a matrix-vector product: numpy's GEMV is 3x faster than GEMM with one column
    if not (target.flags.c_contiguous and target.flags.writeable):
        return False
    first, second = _fortran(b), _fortran(a)  # op(first) = b.T, op(second) = a.T
    if first is None or second is None:
        return False
    out = gemm(1.0, first[0], second[0], beta=1.0, c=target.T, trans_a=first[1], trans_b=second[1], overwrite_c=1)
    return np.shares_memory(out, target) or _copy_back(out, target)


def _fortran(operand: np.ndarray) -> Optional[tuple[np.ndarray, int]]:
    """(array, trans) with array column-major and op(array) = operand.T, or None."""
    if operand.flags.c_contiguous:
        return operand.T, 0
    if operand.flags.f_contiguous:
        return operand, 1
    return None


def _copy_back(out: np.ndarray, target: np.ndarray) -> bool:
    target[...] = out.T  # the wrapper made a copy after all (never seen with contiguous arrays)
    return True
