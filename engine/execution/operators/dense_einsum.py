"""DenseEinsumExec: an EINSUM of stored tensors run once on each as one array, its result cut into tiles.

Each operand is the tensor as one read-only array, built from its tiles once per data version (those to
build on up to `assemblers` threads at once) and kept in the buffer pool (catalog.whole_array); the
kernel is the EINSUM kernel every tile product runs (opt_einsum's order, BLAS), charged to this operator
in EXPLAIN ANALYZE. The result's tiles are views of the one result array, which the operator's
reservation holds until it closes.

With `threads` > 1 (a matrix product beside tile products: optimizer/rules/dense_products.py) the
first array's rows are cut into blocks of `block_rows` rows (whole row tiles, several a thread), which
that many threads take in turn, each with one BLAS thread, as the workers multiply tiles (BLAS's own threads
would keep spinning after the product and slow the tile products after it). Taken in turn, not two
halves: on a shared machine one core often runs slower than the other for a while, and a thread that
falls behind takes fewer blocks (8192 x 1024 times 1024 x 1024 on two threads: 8 blocks 100 ms median
against 111 for 2 halves, whose ends lay 8 ms apart at the median). An `epilogue` (elementwise kernels
of a tile, as a RELU) gives each tile its own array, computed on the block's thread.
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Iterator, Optional

import numpy as np

from trdb.execution import work
from trdb.execution.column_batch import SMALL_TILE_BYTES
from trdb.execution.operators.operator import Batches, BlockingOperator, batches
from trdb.execution.tile_math.compile import compile_expr
from trdb.execution.tile_math.dense_retile import cut_tiles
from trdb.execution.workers import ThreadWorkers
from trdb.plan import expressions as bx
from trdb.storage.tensor_meta import TensorMeta


class DenseEinsumExec(BlockingOperator):
    reads_tiles = True
    canvas = None  # set by the executor when this is the result's operator: the result array is handed over

    def __init__(self, tensors: tuple[TensorMeta, ...], kernel: bx.Bound, tile: tuple[int, ...], threads: int = 1,
                 block_rows: int = 0, epilogue: Optional[bx.Bound] = None, assemblers: int = 1):
        super().__init__()
        self.tensors, self.kernel, self.tile, self.epilogue = tensors, kernel, tile, epilogue
        self.threads, self.block_rows, self.assemblers = threads, block_rows, assemblers

    def _compute(self) -> list:
        backend, catalog = self.ctx.backend, self.ctx.catalog
        # after a write the operands are put together again from their tiles: a copy bound by memory's speed,
        # two of them on two threads in about half the time (2048 x 2048 from 512 tiles: 2.8 ms against 5.2)
        arrays = [catalog.kept_whole_array(meta) for meta in self.tensors]
        missing = [n for n, array in enumerate(arrays) if array is None]
        for n, array in zip(missing, in_turns(lambda n: catalog.whole_array(self.tensors[n]), missing, self.assemblers)):
            arrays[n] = array
        operands = tuple(backend.asarray(array) for array in arrays)
        result_type = self.kernel.type
        result_bytes = math.prod(result_type.tile) * result_type.dtype.itemsize
        self.reservation().grow(result_bytes)
        kernel = compile_expr(self.kernel, backend)
        each = None if self.epilogue is None else compile_expr(self.epilogue, backend)
        bounds = row_blocks(result_type.tile[0], self.block_rows) if self.threads > 1 and backend.on_host else []
        if len(bounds) > 1 and self.canvas is None:
            if each is not None:  # the blocks' products, while their tiles are made from them
                self.reservation().grow(result_bytes)
            parts = in_turns(lambda rows: self._tiles(kernel((operands[0][rows], *operands[1:])), each), bounds,
                             self.threads)
            if each is not None:
                self.reservation().shrink(result_bytes)
            return [(key[0] + rows.start // self.tile[0], *key[1:], value)
                    for rows, tiles in zip(bounds, parts) for key, value in tiles.items()]
        result = kernel(operands)
        if not getattr(getattr(result, "flags", None), "writeable", True):
            result = backend.xp.array(result)  # a view of a kept operand: the result is the caller's to change
        if self.canvas is None and each is None and _small_tiles(result, self.tile):
            return Batches(itertools.chain(*self._stacked(result)))
        tiles = self._tiles(result, each)
        if self.canvas is not None and each is None:
            self.canvas.adopt(result, tiles)  # fetch_tensor() then hands `result` over
        return [key + (value,) for key, value in tiles.items()]

    def _stacked(self, result: np.ndarray) -> tuple[list, Iterator]:
        """The result's tiles as column batches of stacks (cut_tiles), from the result padded to whole tiles."""
        padded = tuple(-(-n // t) * t for n, t in zip(result.shape, self.tile))
        box = result
        if padded != result.shape:
            box = np.zeros(padded, dtype=result.dtype)
            box[tuple(slice(0, n) for n in result.shape)] = result
        stacked, rows = cut_tiles(box, self.tile, result.shape)
        return stacked, batches(rows)

    def _tiles(self, result, each: Optional[Callable]) -> dict[tuple, object]:
        tiles = tiles_of(result, self.tile)
        return tiles if each is None else {key: each((view,)) for key, view in tiles.items()}


def _small_tiles(result, tile: tuple[int, ...]) -> bool:
    """Whether the result is a host array of small tiles (column_batch.SMALL_TILE_BYTES), handed on as stacks."""
    return type(result) is np.ndarray and result.ndim == len(tile) > 0 and \
        math.prod(tile) * result.dtype.itemsize <= SMALL_TILE_BYTES and result.size > 0


def row_blocks(rows: int, block_rows: int) -> list[slice]:
    """`rows` rows in blocks of `block_rows` (the last one shorter where they do not divide)."""
    return [slice(start, min(rows, start + block_rows)) for start in range(0, rows, max(1, block_rows))]


def in_turns(run: Callable[[Any], object], items: list, threads: Optional[int] = None) -> list:
    """`run` of each item (a row block, an operand), in order of the items, on `threads` threads at once
    (default: one an item) that each take the next item not yet taken when they are done with one: this
    thread and worker threads, BLAS on one thread while they run (ThreadWorkers). After a failure no item is
    begun; the first failure is raised once every thread has ended. The work they count is charged to this
    thread's operator. One thread: each item on this thread, in order."""
    if threads == 1 or len(items) <= 1:
        return [run(item) for item in items]
    parts: list = [None] * len(items)
    failures: list[BaseException] = []
    threads = max(1, min(threads or len(items), len(items)))
    counted = [work.Work() for _ in range(threads)]
    taken = itertools.count()  # next() of it is one C call: no two threads take one item

    def take_items(n: int) -> None:
        previous = work.swap(counted[n])
        try:
            while not failures and (n_item := next(taken)) < len(items):
                parts[n_item] = run(items[n_item])
        except BaseException as exc:  # raised on this thread once every thread has ended
            failures.append(exc)
        finally:
            work.swap(previous)
    workers = ThreadWorkers()
    try:
        for n in range(1, threads):
            workers.start(f"dense-einsum-{n}", lambda n=n: take_items(n))
        take_items(0)
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
