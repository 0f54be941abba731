"""Casting source values to a tensor's dtype, refusing the ones it cannot hold (no silent inf or wrap-around).

A finite value that overflows a float dtype (it would become inf), an integer outside an integer
dtype's range, or a NaN, inf or out-of-range float stored as integers is a DataError naming the
tensor and the value's position. NaN and inf already in a float source are kept as they are in a
float tensor. The checks cost nothing for widening casts and one reduction per tile otherwise.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from trdb.errors import DataError


def cast_checked(values: np.ndarray, dtype: np.dtype, name: str, origin: Sequence[int] = ()) -> np.ndarray:
    """`values` as a C-ordered array of `dtype`; a value it cannot hold is a DataError for tensor `name`
    at its position (`origin` is where `values` starts in the whole source)."""
    dtype = np.dtype(dtype)
    with np.errstate(all="ignore"):  # the checks below say what went wrong, not numpy's warnings
        out = np.ascontiguousarray(values, dtype=dtype)
    values = np.asarray(values)
    bad = _misfits(values, out, dtype)
    if bad is not None:
        local = np.unravel_index(int(np.flatnonzero(bad.ravel())[0]), values.shape)
        position = [int(o) + int(i) for o, i in zip(list(origin) + [0] * values.ndim, local)]
        raise _misfit_error(values[local].item(), position, values.dtype, dtype, name)
    return out


def _misfits(values: np.ndarray, out: np.ndarray, dtype: np.dtype) -> Optional[np.ndarray]:
    """A mask of the values that did not survive the cast, or None when all did."""
    if dtype.kind == "b" or values.size == 0 or np.can_cast(values.dtype, dtype, "safe"):
        return None
    if dtype.kind == "f":
        if not np.isinf(out).any():
            return None
        bad = np.isinf(out) & ~np.isinf(values)  # inf already in the source is kept
        return bad if bad.any() else None
    bits = np.iinfo(dtype)
    if values.dtype.kind in "iu":
        return None if values.min() >= bits.min and values.max() <= bits.max else \
            (values < bits.min) | (values > bits.max)
    low, high = float(bits.min), -float(bits.min)  # -2**(n-1) and 2**(n-1) are exact in every float dtype
    if values.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            bad = ~((values >= low) & (values < high))  # NaN and inf fail both comparisons or the second
        return bad if bad.any() else None
    return None


def _misfit_error(value, position: Sequence[int], source: np.dtype, dtype: np.dtype, name: str) -> DataError:
    wider = "float64" if dtype.kind == "f" or source.kind == "f" else "int64"
    why = "it would become inf" if dtype.kind == "f" else \
        "it is outside its range" if np.isfinite(value) else "integers have no NaN or inf"
    return DataError(f'tensor "{name}": the value {value!r} at {list(position)} does not fit in {dtype} ({why})',
                     hint=f"give DTYPE {wider} to keep it" if wider != dtype.name else None)


def check_sparse(matrix, dtype: np.dtype, name: str) -> None:
    """Refuse a scipy.sparse matrix holding a value `dtype` cannot hold (its stored values are checked)."""
    dtype = np.dtype(dtype)
    if np.can_cast(matrix.dtype, dtype, "safe") or dtype.kind == "b":
        return
    coo = matrix.tocoo()
    with np.errstate(all="ignore"):
        bad = _misfits(coo.data, coo.data.astype(dtype), dtype)
    if bad is not None:
        i = int(np.flatnonzero(bad)[0])
        raise _misfit_error(coo.data[i].item(), (int(coo.row[i]), int(coo.col[i])), coo.data.dtype, dtype, name)
