"""The update rules MINIMIZE steps parameters by: SGD and Adam's arithmetic on tiles, apart from planning and storage."""
from __future__ import annotations

import numpy as np


def adam_step(grad: np.ndarray, m: np.ndarray, v: np.ndarray, step: int, beta1: float, beta2: float,
              epsilon: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Adam (as torch.optim.Adam): the new moments from the old ones and this gradient, and the bias-corrected
    direction of step `step` (counted from 1); stacked tiles of one shape at once, elementwise."""
    # the values of `beta1 * m + (1 - beta1) * grad` and so on, with three arrays made instead of a dozen
    new_m = np.multiply(grad, 1 - beta1)
    new_m += beta1 * m
    new_v = np.multiply(grad, 1 - beta2)
    new_v *= grad
    new_v += beta2 * v
    denominator = np.divide(new_v, 1 - beta2 ** step)
    np.sqrt(denominator, out=denominator)
    denominator += epsilon
    direction = np.divide(new_m, 1 - beta1 ** step)
    direction /= denominator
    return new_m, new_v, direction


def sgd_stepped(tiles: list[np.ndarray], rate: float, directions: list[np.ndarray]) -> list[np.ndarray]:
    """tile - rate * direction for each tile, one new array each instead of two (the same values: -(rate * d)
    + tile). Where all have one shape and dtype, the new tiles lie back to back in one buffer, from which
    the tile table is written without a copy (storage/tile_codec.encode_dense_batch)."""
    kinds = {(a.shape, a.dtype) for a in (*tiles, *directions)}
    if len(kinds) == 1 and len(tiles) > 1 and directions[0].dtype in (np.float32, np.float64):
        buffer = np.empty((len(tiles), *tiles[0].shape), dtype=directions[0].dtype)
        outs = [np.multiply(direction, -rate, out=buffer[i]) for i, direction in enumerate(directions)]
    else:
        outs = [np.multiply(direction, -rate) for direction in directions]
    for out, tile in zip(outs, tiles):
        out += tile
    return outs


def sgd_direction(grad: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """SGD's direction: the gradient itself, computed in the parameter's precision where it is float32 or
    float64 (as numpy's `W -= rate * g`, with no float64 copy of every tile), else in float64."""
    if grad.dtype == dtype and dtype in (np.float32, np.float64):
        return grad
    return np.asarray(grad, dtype=np.float64)
