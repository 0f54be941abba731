"""DenseEinsumExec: an EINSUM of stored tensors run once on each as one array, its result cut into tiles.

Each operand is the tensor as one read-only array, built from its tiles once per data version and
kept in the buffer pool (catalog.whole_array); the kernel is the EINSUM kernel every tile product
runs (opt_einsum's order, BLAS), charged to this operator in EXPLAIN ANALYZE. The result's tiles
are views of the one result array, which the operator's reservation holds until it closes.

With `blocks` > 1 (a matrix product beside tile products: optimizer/rules/dense_products.py) the
first array's rows are cut into that many runs of whole row tiles, each multiplied on a thread of its
own with one BLAS thread, as the workers multiply tiles (BLAS's own threads would keep spinning after
the product and slow the tile products after it). An `epilogue` (elementwise kernels of a tile, as
a RELU) gives each tile its own array, computed on the block's thread.
"""
from __future__ import annotations

import itertools
import math
from typing import Callable, Optional

from trdb.execution import work
from trdb.execution.compile import compile_expr
from trdb.execution.operators.operator import BlockingOperator
from trdb.execution.workers import ThreadWorkers
from trdb.planner import expressions as bx
from trdb.storage.tensor_meta import TensorMeta


class DenseEinsumExec(BlockingOperator):
    reads_tiles = True
    canvas = None  # set by the executor when this is the result's operator: the result array is handed over

    def __init__(self, tensors: tuple[TensorMeta, ...], kernel: bx.Bound, tile: tuple[int, ...], blocks: int = 1,
                 epilogue: Optional[bx.Bound] = None):
        super().__init__()
        self.tensors, self.kernel, self.tile, self.blocks, self.epilogue = tensors, kernel, tile, blocks, epilogue

    def _compute(self) -> list:
        backend, catalog = self.ctx.backend, self.ctx.catalog
        operands = tuple(backend.asarray(catalog.whole_array(t)) for t in self.tensors)
        result_type = self.kernel.type
        result_bytes = math.prod(result_type.tile) * result_type.dtype.itemsize
        self.reservation().grow(result_bytes)
        kernel = compile_expr(self.kernel, backend)
        each = None if self.epilogue is None else compile_expr(self.epilogue, backend)
        bounds = row_blocks(result_type.tile[0], self.tile[0], self.blocks) if self.blocks > 1 and backend.on_host else []
        if len(bounds) > 1 and self.canvas is None:
            if each is not None:  # the blocks' products, while their tiles are made from them
                self.reservation().grow(result_bytes)
            parts = in_row_blocks(lambda rows: self._tiles(kernel((operands[0][rows], *operands[1:])), each), bounds)
            if each is not None:
                self.reservation().shrink(result_bytes)
            return [(key[0] + rows.start // self.tile[0], *key[1:], value)
                    for rows, tiles in zip(bounds, parts) for key, value in tiles.items()]
        result = kernel(operands)
        if not getattr(getattr(result, "flags", None), "writeable", True):
            result = backend.xp.array(result)  # a view of a kept operand: the result is the caller's to change
        tiles = self._tiles(result, each)
        if self.canvas is not None and each is None:
            self.canvas.adopt(result, tiles)  # fetch_tensor() then hands `result` over
        return [key + (value,) for key, value in tiles.items()]

    def _tiles(self, result, each: Optional[Callable]) -> dict[tuple, object]:
        tiles = tiles_of(result, self.tile)
        return tiles if each is None else {key: each((view,)) for key, view in tiles.items()}


def row_blocks(rows: int, tile_rows: int, blocks: int) -> list[slice]:
    """At most `blocks` runs of whole row tiles covering `rows` rows, as even as they go."""
    tiles = -(-rows // tile_rows)
    step = -(-tiles // max(1, min(blocks, tiles))) * tile_rows
    return [slice(start, min(rows, start + step)) for start in range(0, rows, step)]


def in_row_blocks(run: Callable[[slice], object], bounds: list[slice]) -> list:
    """`run` of each row block at once: this thread takes the first, a worker thread each other one, BLAS
    on one thread while they run (ThreadWorkers). The work they count is charged to this thread's operator."""
    parts: list = [None] * len(bounds)
    failures: list[BaseException] = []
    counted = [work.Work() for _ in bounds]

    def block(n: int) -> None:
        previous = work.swap(counted[n])
        try:
            parts[n] = run(bounds[n])
        except BaseException as exc:  # raised on this thread once every block has ended
            failures.append(exc)
        finally:
            work.swap(previous)
    workers = ThreadWorkers()
    try:
        for n in range(1, len(bounds)):
            workers.start(f"dense-block-{n}", lambda n=n: block(n))
        block(0)
    finally:
        workers.join()
    if failures:
        raise failures[0]
    work.charge(sum(w.flops for w in counted), sum(w.bytes for w in counted))
    return parts


def tiles_of(array, tile: tuple[int, ...]) -> dict[tuple, object]:
    """Every tile of `array` cut in tiles of `tile` (edge tiles hold the remainder), as views by key."""
    grid = [range(-(-n // t)) for n, t in zip(array.shape, tile)]
    return {key: array[tuple(slice(k * t, (k + 1) * t) for k, t in zip(key, tile)) or ...]  # 0-d: a 0-d view
            for key in itertools.product(*grid)}
