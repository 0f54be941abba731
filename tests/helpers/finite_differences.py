"""Gradients' oracle: a loss view's derivative by float64 central differences, a tensor written element by element."""
from __future__ import annotations

import numpy as np


def load(cur, name, array, tile):
    """`array` as tensor `name` in float64 tiles of `tile`."""
    cur.execute(f"CREATE TENSOR {name} FROM ? TILE ({', '.join(map(str, tile))}) DTYPE float64", [array])


def loss_value(cur, view) -> float:
    return float(cur.execute(f"SELECT * FROM {view}").fetchone()[0])


def finite_differences(cur, view, param, shape, tile, indices, eps=1e-6) -> np.ndarray:
    """Central differences of the loss at `indices` of the parameter (the other entries stay 0); the parameter
    is moved by UPDATE and put back."""
    keys = "ijkl"[:len(shape)]
    grad = np.zeros(shape)
    for index in indices:
        key = tuple(i // t for i, t in zip(index, tile))
        tile_shape = tuple(min(t, n - k * t) for k, t, n in zip(key, tile, shape))
        delta = np.zeros(tile_shape)
        delta[tuple(i % t for i, t in zip(index, tile))] = eps
        where = " AND ".join(f"{param}.{k} = {v}" for k, v in zip(keys, key))
        update = f"UPDATE {param} SET v = {param}.v + ? WHERE {where}"
        cur.execute(update, [delta])
        plus = loss_value(cur, view)
        cur.execute(update, [-2 * delta])
        minus = loss_value(cur, view)
        cur.execute(update, [delta])
        grad[index] = (plus - minus) / (2 * eps)
    return grad
