"""Checks that stored tiles agree with their catalog entry before they are decoded, so no file can crash trdb.

A tile table row is trusted only after its format is known, its nnz fits its shape, its blob has
exactly the bytes that format, shape, dtype and nnz call for, and (CSR) its row pointers run from 0
to nnz without going down and its column indices are sorted within each row and inside the tile.
The row checks are vectorized over all tiles of a read; the CSR checks are a few numpy passes over
each CSR tile's index arrays, so decoding stays a hot path.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from trdb.kernels.axis_reductions import any_in_rows


class CorruptTile(Exception):
    """A tile (by its row in the read) whose stored form is impossible; the caller names the tensor."""

    def __init__(self, row: int, reason: str):
        super().__init__(reason)
        self.row, self.reason = row, reason


def _first(bad: np.ndarray) -> int:
    return int(np.flatnonzero(bad)[0])


def as_counts(values: np.ndarray, what: str) -> np.ndarray:
    """An integer column (fmt, nnz) as int64, refusing NULLs, fractions and non-numbers."""
    values = np.asarray(values)
    if values.dtype.kind in "iu":
        return values.astype(np.int64, copy=False)
    if values.dtype.kind != "f":
        raise CorruptTile(0, f"its {what} column holds {values.dtype} values, not integers")
    bad = ~np.isfinite(values) | (values != np.round(values)) | (np.abs(values) > 2.0 ** 62)
    if bad.any():
        raise CorruptTile(_first(bad), f"its {what} is {values[_first(bad)]!r}")
    return values.astype(np.int64)


def tile_shapes(shapes: Sequence[tuple[int, ...]]) -> np.ndarray:
    """The shapes as an (n, dims) int64 array; a dimension under 1 means a key outside the tensor."""
    array = getattr(shapes, "array", None)  # TensorMeta.tile_shape_list's, made from the keys at once
    if array is None:
        dims = len(shapes[0]) if len(shapes) else 0
        array = np.array(shapes, dtype=np.int64).reshape(len(shapes), dims)
    bad = any_in_rows(array < 1)
    if bad.any():
        raise CorruptTile(_first(bad), "its key lies outside the tensor's shape")
    return array


def check_rows(formats: np.ndarray, nonzeros: np.ndarray, shapes: np.ndarray, lengths: np.ndarray,
               itemsize: int, index_sizes: dict[int, int], csr_allowed: bool) -> None:
    """Every tile's format known, nnz within its shape, and blob length what its format needs (vectorized)."""
    known = formats == 0
    for fmt in index_sizes:
        known |= formats == fmt
    if not known.all():
        raise CorruptTile(_first(~known), f"its format {formats[_first(~known)]} is not a known tile format")
    elements = np.prod(shapes, axis=1, dtype=np.int64)
    bad = (nonzeros < 0) | (nonzeros > elements)
    if bad.any():
        n = _first(bad)
        raise CorruptTile(n, f"its nnz {nonzeros[n]} does not fit a tile of {elements[n]} elements")
    csr = formats != 0
    if csr.any() and (shapes.shape[1] != 2 or not csr_allowed):
        raise CorruptTile(_first(csr), "it is stored as CSR, which this tensor's tiles cannot be")
    expected = _expected_lengths(formats, nonzeros, shapes, elements, itemsize, index_sizes)
    bad = lengths != expected
    if bad.any():
        n = _first(bad)
        raise CorruptTile(n, f"it has {lengths[n]} bytes where its format, shape and nnz need {expected[n]}")


def _expected_lengths(formats, nonzeros, shapes, elements, itemsize: int, index_sizes: dict[int, int]):
    expected = elements * itemsize
    csr = formats != 0
    if csr.any():
        index = np.zeros(len(formats), dtype=np.int64)
        for fmt, size in index_sizes.items():
            index[formats == fmt] = size
        nnz, rows = nonzeros[csr], shapes[csr, 0]
        expected[csr] = (_padded(nnz * itemsize) + _padded(nnz * index[csr]) + _padded((rows + 1) * index[csr]))
    return expected


def _padded(nbytes: np.ndarray) -> np.ndarray:
    return (nbytes + 7) // 8 * 8


def check_csr(rows: np.ndarray, indices: list, pointers: list, nonzeros: np.ndarray, columns: np.ndarray) -> None:
    """For CSR tiles (their rows in the read, index arrays, row pointers, nnz and column counts), all at
    once: row pointers from 0 to nnz, never decreasing; column indices in [0, columns), rising in a row."""
    if len(rows) == 0:
        return
    flat_pointers, lengths = _check_pointers(rows, pointers, nonzeros)
    element_starts = np.zeros(len(rows), np.int64)
    np.cumsum(nonzeros[:-1], out=element_starts[1:])
    flat = np.concatenate(indices)
    if len(flat) == 0:
        return
    if flat.min() < 0 or flat.max() >= columns.min():  # else all are in range (one pass, no per-tile work)
        _check_columns_per_tile(rows, flat, element_starts, nonzeros, columns)
    rising = flat[1:] > flat[:-1]
    row_starts = flat_pointers + np.repeat(element_starts, lengths)
    inner = np.searchsorted(row_starts, [1, len(flat)])  # row_starts rise (the pointers were checked)
    rising[row_starts[inner[0]:inner[1]] - 1] = True  # a new row may start at any column
    if not rising.all():
        tile = np.searchsorted(element_starts, _first(~rising) + 1, side="right") - 1
        raise CorruptTile(int(rows[tile]), "its column indices are not sorted and distinct within a row")


def _check_columns_per_tile(rows: np.ndarray, flat: np.ndarray, element_starts: np.ndarray,
                            nonzeros: np.ndarray, columns: np.ndarray) -> None:
    has = nonzeros > 0
    lowest = np.minimum.reduceat(flat, element_starts[has])
    highest = np.maximum.reduceat(flat, element_starts[has])
    bad = (lowest < 0) | (highest >= columns[has])
    if bad.any():
        n = _first(bad)
        raise CorruptTile(int(rows[has][n]), f"a column index lies outside [0, {columns[has][n]})")


def _lengths(arrays: list) -> np.ndarray:
    return np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))


def _check_pointers(rows: np.ndarray, pointers: list, nonzeros: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each tile's row pointers start at 0, end at its nnz and never decrease; returns them all in one
    array, and each tile's count of them."""
    lengths = _lengths(pointers)
    starts = np.zeros(len(pointers), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    flat = np.concatenate(pointers)
    bad = (flat[starts] != 0) | (flat[starts + lengths - 1] != nonzeros)
    if bad.any():
        n = _first(bad)
        raise CorruptTile(int(rows[n]), f"its row pointers run from {flat[starts[n]]} to "
                                        f"{flat[starts[n] + lengths[n] - 1]}, not from 0 to its nnz {nonzeros[n]}")
    rising = flat[1:] >= flat[:-1]
    rising[starts[1:] - 1] = True  # the next tile starts again at 0
    if not rising.all():
        tile = np.searchsorted(starts, _first(~rising) + 1, side="right") - 1
        raise CorruptTile(int(rows[tile]), "its row pointers decrease")
    return flat, lengths
