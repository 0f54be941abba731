"""DenseEinsumExec: an EINSUM of stored tensors run once on each as one array, its result cut into tiles.

Each operand is the tensor as one read-only array, built from its tiles once per data version and
kept in the buffer pool (catalog.whole_array); the kernel is the EINSUM kernel every tile product
runs (opt_einsum's order, BLAS), charged to this operator in EXPLAIN ANALYZE. The result's tiles
are views of the one result array, which the operator's reservation holds until it closes.
"""
from __future__ import annotations

import itertools
import math

from trdb.execution.compile import compile_expr
from trdb.execution.operators.operator import BlockingOperator
from trdb.planner import expressions as bx
from trdb.storage.tensor_meta import TensorMeta


class DenseEinsumExec(BlockingOperator):
    reads_tiles = True
    canvas = None  # set by the executor when this is the result's operator: the result array is handed over

    def __init__(self, tensors: tuple[TensorMeta, ...], kernel: bx.Bound, tile: tuple[int, ...]):
        super().__init__()
        self.tensors, self.kernel, self.tile = tensors, kernel, tile

    def _compute(self) -> list:
        backend, catalog = self.ctx.backend, self.ctx.catalog
        operands = tuple(backend.asarray(catalog.whole_array(t)) for t in self.tensors)
        result_type = self.kernel.type
        self.reservation().grow(math.prod(result_type.tile) * result_type.dtype.itemsize)
        result = compile_expr(self.kernel, backend)(operands)
        if not getattr(getattr(result, "flags", None), "writeable", True):
            result = backend.xp.array(result)  # a view of a kept operand: the result is the caller's to change
        tiles = tiles_of(result, self.tile)
        if self.canvas is not None:
            self.canvas.adopt(result, tiles)  # fetch_tensor() then hands `result` over
        return [key + (view,) for key, view in tiles.items()]


def tiles_of(array, tile: tuple[int, ...]) -> dict[tuple, object]:
    """Every tile of `array` cut in tiles of `tile` (edge tiles hold the remainder), as views by key."""
    grid = [range(-(-n // t)) for n, t in zip(array.shape, tile)]
    return {key: array[tuple(slice(k * t, (k + 1) * t) for k, t in zip(key, tile)) or ...]  # 0-d: a 0-d view
            for key in itertools.product(*grid)}
