"""Result placement: a statement's final dense products written where fetch_tensor() will read them.

A matrix product's result is `SUM(MATMUL(...)) ... GROUP BY` its output keys. Without placement each
group's sum is a tile of its own, and fetch_tensor() copies every tile into a fresh array: for a
2048 x 2048 float32 product in 1024 tiles that copy (and the page faults of the fresh array) is
about 3 ms of a 60 ms statement. With placement, the plan's last aggregate computes each group's
first product straight into the group's place in one array (the canvas, not zeroed: the places of
absent tiles are zeroed when it is handed over), adds the others there, and its result tiles
are views of that array. A result whose tiles are single products (the root of an EINSUM whose summed
letters are whole in one tile: a projection of MATMUL or EINSUM) is placed the same way, each product
computed into its place. fetch_tensor() hands the array over when the rows it assembles are exactly
the views placed. Any other case (a group that spilled, rows already fetched, another shape asked
for) assembles as before: the canvas is an optimization, never a second source of truth.
"""
from __future__ import annotations

import math
import threading
from typing import Optional, Sequence

import numpy as np

from trdb.plan import expressions as bx
from trdb.plan import physical_operators as po
from trdb.plan.physical import PhysicalNode
from trdb.plan.types import TensorType

PLACED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))  # what BLAS writes in place
MAX_GRID_SCANNED = 1 << 16  # tiles in a result's grid beyond which absent ones are not zeroed one by one


class ResultCanvas:
    """One array of the result's shape, and the views of it handed out as groups' sums. It is not zeroed
    when made (for a 2048 x 2048 float32 product that memset is 2 ms of 55): a place is written whole by
    the product computed into it, zeroed when handed out to be added into (`zeroed`), and the places no
    tile took are zeroed when the array is handed over as the result (`assembled`)."""

    def __init__(self, node: PhysicalNode, shape: tuple[int, ...], tile: tuple[int, ...], dtype: np.dtype,
                 one_group_at: Optional[tuple] = None, allocate: bool = True):
        self.node = node  # the aggregate (or projection, or DenseEinsum) whose tiles are placed
        self.shape, self.dtype = shape, dtype
        # without `allocate`, the operator hands over the whole result (`adopt`) before placing its tiles
        self.array: Optional[np.ndarray] = np.empty(shape, dtype=dtype) if allocate else None
        self.tile = tile
        self.one_group_at = one_group_at  # an aggregate of no keys: its one group's keys, projected above it
        self._views: dict[tuple, np.ndarray] = {}
        self._lock = threading.Lock()

    def slot(self, key: tuple, shape: tuple[int, ...], dtype: np.dtype, contiguous: bool = False,
             zeroed: bool = False) -> Optional[np.ndarray]:
        """The view where the tile under `key` goes, if a tile of `shape` and `dtype` fits there exactly
        (an edge tile is smaller) and, with `contiguous`, that view is C-ordered; None otherwise, and the
        group keeps a tile of its own. The caller writes the whole view, or asks for it `zeroed`."""
        if key == () and self.one_group_at is not None:
            key = self.one_group_at
        if self.array is None or dtype != self.dtype or len(key) != len(self.tile) or len(shape) != len(self.tile):
            return None
        slices = []
        for k, t, n, extent in zip(key, self.tile, shape, self.shape):
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
        if zeroed:
            view[...] = 0
        return view

    def holds(self, key: tuple, value) -> bool:
        """Whether `value` is the view handed out for `key`."""
        return self._views.get(key) is value

    def adopt(self, array: np.ndarray, views: dict[tuple, np.ndarray]) -> bool:
        """Make `array` (the whole result, computed at once: a DenseEinsum's) the canvas, and `views` (its
        tiles by key, every tile of it) the tiles placed, if nothing was placed yet and it has the
        canvas's shape and dtype."""
        with self._lock:
            if self._views or self.array is not None or array.shape != self.shape or array.dtype != self.dtype:
                return False
            self.array = array
            self._views = dict(views)
        return True

    def forget(self, key: tuple) -> None:
        """The view handed out for `key` was not used after all (its place is not the tile's)."""
        if key == () and self.one_group_at is not None:
            key = self.one_group_at
        with self._lock:
            self._views.pop(key, None)

    def assembled(self, rows: Sequence[tuple], key_positions: tuple[int, ...], value_position: int,
                  shape: Sequence[int]) -> Optional[np.ndarray]:
        """The canvas as the assembled result, when `rows` are exactly the tiles placed in it (every
        one a view it handed out, under its own key, and nothing else placed); else None."""
        if self.array is None or tuple(shape) != self.shape or len(rows) != len(self._views):
            return None
        for row in rows:
            if not self.holds(tuple(row[p] for p in key_positions), row[value_position]):
                return None
        return self.array if self._zero_the_rest() else None

    def _zero_the_rest(self) -> bool:
        """Zero the places of the tiles that were not placed (absent tiles); False where there are too many
        tiles in the grid to look for them one by one (then the result is assembled from the rows)."""
        grid = tuple(-(-n // t) for n, t in zip(self.shape, self.tile))
        if len(self._views) == math.prod(grid):
            return True
        if math.prod(grid) > MAX_GRID_SCANNED:
            return False
        for key in np.ndindex(*grid):
            if key not in self._views:
                self.array[tuple(slice(k * t, (k + 1) * t) for k, t in zip(key, self.tile))] = 0
        return True


def canvas_for(root: PhysicalNode, budget: int) -> Optional[ResultCanvas]:
    """A canvas for the plan's result, or None: when its last operator (under a gather) computes a dense
    matrix result's tiles by products, as a final aggregate of one SUM of such a product grouped by the
    result's two keys or as a projection of the two keys and one MATMUL or two-operand EINSUM, and the
    result's whole shape is known and takes at most `budget` bytes. An aggregate of no keys (an EINSUM
    whose output is one tile) is placed under a projection of constant keys and its sum. A DenseEinsum
    (which computes the whole result at once, of any rank) gets a canvas it fills with its own array."""
    node = root.children[0] if root.exchange is not None and len(root.children) == 1 else root
    if isinstance(node.spec, po.DenseEinsum):
        return _whole_result_canvas(node, budget)
    one_group_at = _constant_keys(node)
    if one_group_at is not None:
        node = node.children[0]
    elif not _products(node.spec, 2) or len(node.schema) != 3:
        return None
    if not all(c.is_key for c in root.schema[:2]):
        return None
    column = node.schema[-1].type
    if not isinstance(column, TensorType) or column.dtype not in PLACED_DTYPES or len(column.tile) != 2 \
            or None in column.extent:
        return None
    shape = tuple(int(n) for n in column.extent)
    if math.prod(shape) * column.dtype.itemsize > budget:
        return None
    return ResultCanvas(node, shape, tuple(column.tile), column.dtype, one_group_at)


def _whole_result_canvas(node: PhysicalNode, budget: int) -> Optional[ResultCanvas]:
    column = node.schema[-1].type
    if column.dtype not in PLACED_DTYPES or math.prod(column.extent) * column.dtype.itemsize > budget:
        return None
    return ResultCanvas(node, tuple(column.extent), tuple(column.tile), column.dtype, allocate=False)


def _constant_keys(node: PhysicalNode) -> Optional[tuple]:
    """The keys of a projection of two constant keys and the sum of an aggregate of no keys below it, or None."""
    spec = node.spec
    if not isinstance(spec, po.Project) or len(spec.exprs) != 3 or len(node.children) != 1:
        return None
    below = node.children[0]
    if not _products(below.spec, 0) or spec.exprs[2] != bx.ColumnIndex(len(below.schema) - 1, below.schema[-1].type):
        return None
    keys = tuple(e.value for e in spec.exprs[:2] if isinstance(e, bx.Const))
    return keys if len(keys) == 2 and all(type(k) is int for k in keys) else None


def _products(spec, keys: int) -> bool:
    """Whether the operator's last column is computed by matrix products: a SUM of them grouped by `keys`
    keys, or a projected product."""
    if isinstance(spec, po.HashAggregate):
        if spec.partial or len(spec.calls) != 1 or len(spec.group_by) != keys:
            return False
        call = spec.calls[0]
        return call.function == "SUM" and product_call(call.arg) is not None
    return isinstance(spec, po.Project) and product_call(spec.exprs[-1]) is not None


def product_call(expr) -> Optional[tuple]:
    """(EINSUM's spec or None for MATMUL, left, right) of a MATMUL of two arguments, or of an EINSUM of a
    constant spec and two operands; None for any other expression."""
    if not isinstance(expr, bx.Call):
        return None
    name, args = expr.function.name, expr.args
    if name == "MATMUL" and len(args) == 2:
        return None, args[0], args[1]
    if name == "EINSUM" and len(args) == 3 and isinstance(args[0], bx.Const) and isinstance(args[0].value, str):
        return args[0].value, args[1], args[2]
    return None
