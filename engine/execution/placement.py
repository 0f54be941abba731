"""Result placement: a statement's final dense products written where fetch_tensor() will read them.

A matrix product's result is `SUM(MATMUL(...)) ... GROUP BY` its output keys. Without placement each
group's sum is a tile of its own, and fetch_tensor() copies every tile into a fresh array: for a
2048 x 2048 float32 product in 1024 tiles that copy (and the page faults of the fresh array) is
about 3 ms of a 60 ms statement. With placement, the plan's last aggregate computes each group's
first product straight into the group's place in one zeroed array (the canvas: absent tiles are
zeros, and pages no tile touches are never allocated), adds the others there, and its result tiles
are views of that array; fetch_tensor() hands the array over when the rows it assembles are exactly
the views placed. Any other case (a group that spilled, rows already fetched, another shape asked
for) assembles as before: the canvas is an optimization, never a second source of truth.
"""
from __future__ import annotations

import math
import threading
from typing import Optional, Sequence

import numpy as np

from trdb.optimizer import physical_operators as po
from trdb.optimizer.physical_plan import PhysicalNode
from trdb.planner import expressions as bx
from trdb.planner.types import TensorType

PLACED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))  # what BLAS writes in place


class ResultCanvas:
    """One zeroed array of the result's shape, and the views of it handed out as groups' sums."""

    def __init__(self, node: PhysicalNode, shape: tuple[int, ...], tile: tuple[int, ...], dtype: np.dtype):
        self.node = node  # the aggregate whose groups are placed
        self.array = np.zeros(shape, dtype=dtype)
        self.tile = tile
        self._views: dict[tuple, np.ndarray] = {}
        self._lock = threading.Lock()

    def slot(self, key: tuple, shape: tuple[int, ...], dtype: np.dtype,
             contiguous: bool = False) -> Optional[np.ndarray]:
        """The view where the tile under `key` goes, if a tile of `shape` and `dtype` fits there exactly
        (an edge tile is smaller) and, with `contiguous`, that view is C-ordered; None otherwise, and the
        group keeps a tile of its own."""
        if dtype != self.array.dtype or len(key) != len(self.tile) or len(shape) != len(self.tile):
            return None
        slices = []
        for k, t, n, extent in zip(key, self.tile, shape, self.array.shape):
            if type(k) is not int or k < 0 or min(t, extent - k * t) != n:
                return None
            slices.append(slice(k * t, k * t + n))
        view = self.array[tuple(slices)]
        if contiguous and not view.flags.c_contiguous:
            return None
        with self._lock:
            if key in self._views:
                return None  # a key placed twice (a group spilled and merged again): its own tile
            self._views[key] = view
        return view

    def forget(self, key: tuple) -> None:
        """The view handed out for `key` was not used after all (its place is still zeros)."""
        with self._lock:
            self._views.pop(key, None)

    def assembled(self, rows: Sequence[tuple], key_positions: tuple[int, ...], value_position: int,
                  shape: Sequence[int]) -> Optional[np.ndarray]:
        """The canvas as the assembled result, when `rows` are exactly the tiles placed in it (every
        one a view it handed out, under its own key, and nothing else placed); else None."""
        if tuple(shape) != self.array.shape or len(rows) != len(self._views):
            return None
        for row in rows:
            if self._views.get(tuple(row[p] for p in key_positions)) is not row[value_position]:
                return None
        return self.array


def canvas_for(root: PhysicalNode, budget: int) -> Optional[ResultCanvas]:
    """A canvas for the plan's result, or None: when its last operator (under a gather) is a final
    aggregate of one dense SUM(MATMUL(...)) grouped by the result's keys, whose whole shape is known
    and takes at most `budget` bytes."""
    node = root.children[0] if root.exchange is not None and len(root.children) == 1 else root
    spec = node.spec
    if not isinstance(spec, po.HashAggregate) or spec.partial or len(spec.calls) != 1:
        return None
    call = spec.calls[0]
    if call.function != "SUM" or not isinstance(call.arg, bx.Call) or call.arg.function.name != "MATMUL":
        return None
    column = spec.schema[-1].type
    if not isinstance(column, TensorType) or column.dtype not in PLACED_DTYPES or len(column.tile) != 2:
        return None
    if len(spec.group_by) != 2 or not all(c.is_key for c in spec.schema[:2]) or None in column.extent:
        return None
    shape = tuple(int(n) for n in column.extent)
    if math.prod(shape) * column.dtype.itemsize > budget:
        return None
    return ResultCanvas(node, shape, tuple(column.tile), column.dtype)
