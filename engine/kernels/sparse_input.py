"""A scipy.sparse value a user hands trdb, checked before any scipy call reads its arrays.

scipy trusts the arrays of a matrix that was built and then changed by hand: a CSR matrix whose
indptr runs past its entries makes tocoo() write past the end of an array (heap corruption, the
process dies), and an index out of range fails deep inside a conversion. So the structure is checked
here, in numpy only, where the value enters: the shape, the compressed formats' indptr (its length,
first value 0, last within its entries, never decreasing) and indices (in range), COO's coordinates (as many as the
values, in range); DIA, DOK and LIL are converted to COO by Python and numpy code and that is checked.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from trdb.errors import DataError

_HINT = "build the matrix with scipy.sparse's constructors, or call its check_format(full_check=True)"
_INDEX_LIMIT = 1 << 62  # a dimension past this has no int64 index (or element count) that reaches it


def checked_sparse(value: Any, what: str) -> Any:
    """`value` (a scipy.sparse array or matrix) once its arrays agree with each other and with its shape;
    a DataError naming `what` ("the scipy.sparse matrix given for ?") and the fault otherwise."""
    if not type(value).__module__.startswith("scipy."):
        return value  # a device matrix (cupy) is built and checked by its own library
    try:
        shape = _shape(value)
        fmt = getattr(value, "format", None)
        if fmt in ("csr", "csc"):
            major, minor = _axes(shape, fmt == "csc")
            _compressed(value.indptr, value.indices, value.data, major, minor)
        elif fmt == "bsr":
            _blocks(value, shape)
        elif fmt == "coo":
            _coordinates(value.coords, value.data, shape)
        elif fmt in ("dia", "dok", "lil"):
            if fmt == "lil":
                _lil_rows(value, shape)
            coo = value.tocoo()  # Python and numpy code for these formats: a fault is an exception, no crash
            _coordinates(coo.coords, coo.data, shape)
        else:
            raise ValueError(f"its format {fmt!r} is not one scipy.sparse has")
    except _Fault as fault:
        raise DataError(f"{what} is inconsistent: {fault}", hint=_HINT) from None
    except (AttributeError, TypeError, ValueError, IndexError, OverflowError) as exc:
        raise DataError(f"{what} cannot be read: {exc}", hint=_HINT) from None
    return value


class _Fault(Exception):
    """A structural fault of the matrix, said in words."""


def _shape(value: Any) -> tuple[int, ...]:
    shape = tuple(value.shape)
    if not shape or not all(isinstance(n, (int, np.integer)) and 0 <= n < _INDEX_LIMIT for n in shape):
        raise _Fault(f"its shape {shape} is not a tuple of sizes from 0 to 2**62")
    return tuple(int(n) for n in shape)


def _axes(shape: tuple[int, ...], by_column: bool) -> tuple[int, int]:
    """(rows of the index pointer, range of the indices) of a compressed matrix (a 1-d one is one row)."""
    if len(shape) == 1:
        return 1, shape[0]
    if len(shape) != 2:
        raise _Fault(f"a compressed matrix of shape {shape} is not 2-d")
    return (shape[1], shape[0]) if by_column else shape


def _integers(array: Any, name: str) -> np.ndarray:
    array = np.asarray(array)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise _Fault(f"its {name} is not a 1-d array of integers ({array.dtype}, {array.ndim}-d)")
    return array


def _compressed(indptr: Any, indices: Any, data: Any, major: int, minor: int) -> None:
    indptr, indices = _integers(indptr, "indptr"), _integers(indices, "indices")
    data = np.asarray(data)
    if len(indptr) != major + 1:
        raise _Fault(f"its indptr has {len(indptr)} entries, {major + 1} expected (one more than its rows)")
    values = data.shape[0] if data.ndim else 0
    if len(indices) != values:
        raise _Fault(f"it has {len(indices)} indices and {values} values")
    if indptr[0] != 0 or not 0 <= indptr[-1] <= len(indices):  # scipy allows room past the last entry
        raise _Fault(f"its indptr runs from {indptr[0]} to {indptr[-1]}, not from 0 to at most its {len(indices)} "
                     "entries")
    if major and np.any(np.diff(indptr) < 0):
        at = int(np.flatnonzero(np.diff(indptr) < 0)[0])
        raise _Fault(f"its indptr decreases after entry {at} ({indptr[at]}, then {indptr[at + 1]})")
    _in_range(indices[:indptr[-1]], minor, "an index")


def _in_range(indices: np.ndarray, size: int, what: str) -> None:
    if len(indices) and (indices.min() < 0 or indices.max() >= size):
        bad = indices.min() if indices.min() < 0 else indices.max()
        raise _Fault(f"{what} {int(bad)} lies outside 0..{size - 1}")


def _blocks(value: Any, shape: tuple[int, ...]) -> None:
    rows, cols = (int(n) for n in value.blocksize)
    if len(shape) != 2 or rows < 1 or cols < 1 or shape[0] % rows or shape[1] % cols:
        raise _Fault(f"its blocks of {rows} x {cols} do not tile its shape {shape}")
    data = np.asarray(value.data)
    if data.ndim != 3 or data.shape[1:] != (rows, cols):
        raise _Fault(f"its blocks have shape {data.shape[1:]}, {(rows, cols)} expected")
    _compressed(value.indptr, value.indices, data, shape[0] // rows, shape[1] // cols)


def _coordinates(coords: Any, data: Any, shape: tuple[int, ...]) -> None:
    coords, data = tuple(coords), np.asarray(data)
    if len(coords) != len(shape):
        raise _Fault(f"it has {len(coords)} coordinate arrays for its {len(shape)}-d shape")
    for axis, (where, size) in enumerate(zip(coords, shape)):
        where = _integers(where, f"coordinates of axis {axis}")
        if data.ndim != 1 or len(where) != len(data):
            raise _Fault(f"it has {len(where)} coordinates of axis {axis} and {data.size} values")
        _in_range(where, size, f"a coordinate of axis {axis}")


def _lil_rows(value: Any, shape: tuple[int, ...]) -> None:
    """LIL's rows and values: one list each per row, of the same lengths (scipy's flattening trusts them)."""
    rows, data = value.rows, value.data
    if len(shape) != 2 or len(rows) != shape[0] or len(data) != shape[0]:
        raise _Fault(f"it has {len(rows)} row lists and {len(data)} value lists for {shape[0]} rows")
    if any(len(r) != len(d) for r, d in zip(rows, data)):
        raise _Fault("a row's index list and value list differ in length")
