"""A tensor's tiles put together into one read-only array (absent tiles are zeros): a DenseEinsum's operand."""
from __future__ import annotations

from typing import Optional

import numpy as np

from trdb.kernels.sparse import dense
from trdb.storage.tensor_meta import TensorMeta


def the_one_tile(meta: TensorMeta, tiles: list) -> Optional[np.ndarray]:
    """The tensor's only tile when it is the whole tensor, dense and read-only (as the buffer pool keeps it)."""
    if len(tiles) == 1 and isinstance(tiles[0], np.ndarray) and tiles[0].shape == tuple(meta.shape) \
            and not tiles[0].flags.writeable:
        return tiles[0]
    return None


def whole_array(meta: TensorMeta, keys: np.ndarray, tiles: list) -> np.ndarray:
    """The tensor of shape `meta.shape` whose tile under key (K1..Kd) is `tiles[n]` for `keys[n]`."""
    out = np.zeros(meta.shape, dtype=meta.dtype)
    for key, tile in zip(keys.tolist(), tiles):
        where = tuple(slice(k * t, k * t + n) for k, t, n in zip(key, meta.tile, np.shape(tile)))
        out[where] = dense(tile)  # the keys cover the leading axes; the trailing ones are whole
    out.flags.writeable = False  # shared by every statement that reads this version
    return out
