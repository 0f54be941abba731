"""One value as a table shows it: scalars, and tiles as numpy prints them (small in full, large summarized)."""
from __future__ import annotations

from decimal import Decimal
from typing import Any, Optional

import numpy as np

from trdb.kernels.sparse import count_nonzero, dense, is_sparse

FULL_VALUES = 16        # a tile of at most this many values is always printed in full
MOST_VALUES = 256       # ... and one of at most this many where its lines fit the width at hand
MOST_LINES = 16
PRECISION = 4           # digits after the point in a shown tile (torch's default): csv and json print all


def is_tile(value: Any) -> bool:
    return isinstance(value, np.ndarray) or is_sparse(value)


def is_number(value: Any) -> bool:
    """Whether a value is shown right-aligned: a number, not a boolean."""
    return isinstance(value, (int, float, Decimal, np.number)) and not isinstance(value, (bool, np.bool_))


def scalar_text(value: Any) -> str:
    """A scalar in a table: NULL, floats to 6 significant digits, the rest as str()."""
    if value is None:
        return "NULL"
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.6g}"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    return str(value)


def cell_lines(value: Any, width: Optional[int] = None) -> list[str]:
    """The lines of one cell: a tile may take several (as numpy prints a matrix); width is the room
    the cell may take, which lets a tile of more than FULL_VALUES values show in full."""
    if not is_tile(value):
        return scalar_text(value).replace("\r", "").split("\n")
    lines = _full_lines(value, width)
    return lines if lines is not None else [tile_summary(value)]


def _full_lines(tile: Any, width: Optional[int]) -> Optional[list[str]]:
    size = int(np.prod(tile.shape)) if tile.shape else 1
    if size > MOST_VALUES:
        return None
    array = np.asarray(dense(tile))
    with np.printoptions(precision=PRECISION, suppress=True, threshold=MOST_VALUES + 1, linewidth=10**6):
        lines = str(array).split("\n")
    if size <= FULL_VALUES:
        return lines
    fits = width is not None and max(map(len, lines)) <= width and len(lines) <= MOST_LINES
    return lines if fits else None


def tile_summary(tile: Any) -> str:
    """shape, dtype, min/max/mean, and the non-zeros when fewer than half are (or the tile is sparse)."""
    shape = "x".join(str(n) for n in tile.shape)
    size = int(np.prod(tile.shape)) if tile.shape else 1
    if size == 0:
        return f"{shape} {tile.dtype.name} (empty)"
    if is_sparse(tile):
        data = np.asarray(tile.data, dtype=np.float64)
        nnz = int(np.count_nonzero(data))
        low, high = _bounds(data, nnz < size)
        mean = float(data.sum()) / size
    else:
        values = np.asarray(tile)
        nnz = count_nonzero(values)
        floats = values.astype(np.float64, copy=False)
        low, high, mean = float(floats.min()), float(floats.max()), float(floats.mean())
    text = f"{shape} {tile.dtype.name} min={low:.4g} max={high:.4g} mean={mean:.4g}"
    if is_sparse(tile) or nnz * 2 < size:
        text += f" nnz={nnz} ({100 * nnz / size:.3g}%)"
    return text


def _bounds(data: np.ndarray, has_zeros: bool) -> tuple[float, float]:
    if data.size == 0:
        return 0.0, 0.0
    low, high = float(data.min()), float(data.max())
    return (min(low, 0.0), max(high, 0.0)) if has_zeros else (low, high)
