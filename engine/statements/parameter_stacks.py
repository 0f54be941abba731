"""A MINIMIZE step on stacks: a parameter, its gradient and Adam's moments as arrays `(n, *tile)` in key order.

Where every stored tile of a parameter is dense and of one shape (an embedding of one row a tile, a
weight in one tile) and its gradient's tuples are dense tiles of that shape under its keys, a
step is a few whole-array operations and one stacked write per tensor, with no Python step per tile.
Anything else (edge tiles, CSR tiles, a gradient reaching tiles the parameter lacks, moments under
other keys) returns None, and the step goes tile by tile (statements/minimize.py): the same values.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np

from trdb.execution.column_batch import is_columns, to_columns
from trdb.execution.spool import row_batches
from trdb.kernels.distinct import all_distinct
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_runs import TileRuns
from trdb.storage.tile_store import key_order


@dataclass(frozen=True)
class Stack:
    """Tiles of one shape: `keys` n x m int64 in key order, `tiles` `(n, *tile)` (row i under keys[i])."""
    keys: np.ndarray
    tiles: np.ndarray


def stored_stack(keys: np.ndarray, tiles: list) -> Optional[Stack]:
    """A read's tiles (keys n x m, tiles as `catalog.tiles` gives them) as one stack in key order, where they
    are all dense of one shape and dtype and lie in runs: one run as it is, several (a read of a million
    tiles comes in batches) concatenated; else None."""
    pieces = list(tiles.pieces()) if isinstance(tiles, TileRuns) and len(tiles) else [(0, 0, None)]
    stacks = [stack for _, _, stack in pieces]
    if any(stack is None for stack in stacks) or len({(s.shape[1:], s.dtype) for s in stacks}) != 1:
        return None
    stack = stacks[0] if len(stacks) == 1 else np.concatenate(stacks)
    order = key_order(keys)
    return Stack(keys, stack) if order is None else Stack(keys[order], stack[order])


def gradient_stack(rows, key_count: int) -> Optional[Stack]:
    """A gradient's tuples (keys then one tile, a list or a spool) as one stack in key order, where every tile
    is a dense array of one shape and dtype (a column batch's stack, else stacked: one tile as a view); else
    None."""
    keys, tiles = [], []
    for batch in row_batches(rows):
        columns = _key_and_tile_columns(batch, key_count)
        if columns is None:
            return None
        keys.append(columns[0])
        tiles.append(columns[1])
    if not tiles or len({(t.shape[1:], t.dtype) for t in tiles}) != 1:
        return None
    stack = Stack(np.concatenate(keys), tiles[0] if len(tiles) == 1 else np.concatenate(tiles))
    order = key_order(stack.keys)
    return stack if order is None else Stack(stack.keys[order], stack.tiles[order])


def _key_and_tile_columns(batch, key_count: int) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """A batch of (keys..., tile) tuples as a key array n x key_count and a tile stack `(n, *tile)`; None where a
    key is not an int or a tile not a dense array of the batch's one shape and dtype."""
    columns = to_columns(batch)
    if columns is not None:
        if len(columns.columns) != key_count + 1 or not columns.is_tile[-1] or any(columns.is_tile[:-1]):
            return None
        keys = np.stack(columns.keys(), axis=1) if key_count else np.zeros((len(columns), 0), np.int64)
        return keys, columns.columns[-1]
    if is_columns(batch, nulls=True) or not batch:  # a column batch to_columns did not take: NULL keys
        return None
    first = batch[0][-1]  # tiles too large for a column batch (a weight in one tile of 1433 x 16)
    if type(first) is not np.ndarray or any(len(row) != key_count + 1 or type(row[-1]) is not np.ndarray
                                            or row[-1].shape != first.shape or row[-1].dtype != first.dtype
                                            or any(type(k) is not int for k in row[:-1]) for row in batch):
        return None
    keys = np.array([row[:-1] for row in batch], dtype=np.int64).reshape(len(batch), key_count)
    return keys, stacked([row[-1] for row in batch])


def stacked(tiles: list[np.ndarray]) -> np.ndarray:
    """The tiles along a new first axis: one tile as a view, several copied."""
    return tiles[0][np.newaxis] if len(tiles) == 1 else np.stack(tiles)


def positions_in(stack: Stack, among: Stack, meta: TensorMeta) -> Optional[np.ndarray]:
    """Where each of `stack`'s keys is among `among`'s (both in key order, keys unique): None where one is
    not there, or a key repeats."""
    if not len(stack.keys):
        return np.zeros(0, dtype=np.int64)
    wanted, present = _linear(stack.keys, meta), _linear(among.keys, meta)
    if not all_distinct(wanted):
        return None
    positions = np.searchsorted(present, wanted)
    inside = positions < len(present)
    if not inside.all() or not np.array_equal(present[positions], wanted):
        return None
    return positions


def _linear(keys: np.ndarray, meta: TensorMeta) -> np.ndarray:
    """Key rows as one number each (ascending with key order): their place in the tensor's grid."""
    if keys.shape[1] == 0:
        return np.zeros(len(keys), dtype=np.int64)
    return np.ravel_multi_index(tuple(keys.T), tuple(meta.grid))


def full_gradient(gradient: Stack, positions: np.ndarray, count: int, dtype: np.dtype) -> np.ndarray:
    """The gradient at every one of `count` tiles, as `dtype`: zero where the loss does not reach a tile (a
    zero gradient still moves it under Adam, as PyTorch steps a whole parameter)."""
    if len(positions) == count:
        return np.asarray(gradient.tiles, dtype=dtype)
    full = np.zeros((count, *gradient.tiles.shape[1:]), dtype=dtype)
    full[positions] = gradient.tiles
    return full


def same_keys(stacks: Iterable[Optional[Stack]], keys: np.ndarray) -> bool:
    """Every stack is there and holds exactly `keys`' tiles, in order, of one shape."""
    return all(s is not None and np.array_equal(s.keys, keys) for s in stacks)
