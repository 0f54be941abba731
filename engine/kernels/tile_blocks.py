"""An array seen as its tiles: a view (grid..., tile...) through which whole stacks of tiles are written or read."""
from __future__ import annotations

import math

import numpy as np

from trdb.kernels.distinct import all_distinct


def blocks(array: np.ndarray, tile: tuple[int, ...]) -> np.ndarray:
    """A view of `array` (each axis a multiple of `tile`'s) as (grid..., tile...): `blocks(a, t)[tuple(keys.T)]`
    are the tiles under `keys`, one fancy index for a whole stack."""
    d = len(tile)
    split = array.reshape([n for axis in range(d) for n in (array.shape[axis] // tile[axis], tile[axis])])
    return split.transpose(list(range(0, 2 * d, 2)) + list(range(1, 2 * d, 2)))


def fills_grid(keys: np.ndarray, grid: tuple[int, ...]) -> bool:
    """Whether `keys` (n x d) are every key of `grid`, each once."""
    return len(keys) == math.prod(grid) and len(keys) > 0 and keys.min() >= 0 and \
        not (keys >= np.array(grid)).any() and all_distinct(np.ravel_multi_index(tuple(keys.T), grid))
