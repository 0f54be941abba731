"""The tile trdb chooses when a statement leaves TILE out: the cost model's idea of a good tile.

A tuple costs `TUPLE_COST_FLOPS` (a hash probe, a kernel call: ~10 us) and an element of a kernel
result `ELEMENT_COST` (~1 ns), so a tile of `TUPLE_COST_FLOPS / ELEMENT_COST` (10,000) elements
spends as long on overhead as on its cheapest (elementwise) work. A good tile has several times
that: `OVERHEAD_SHARE` keeps the per-tuple overhead of an elementwise kernel near 15% (and far less
for MATMUL, whose work grows faster than its elements), which gives 65,536 elements, 256 x 256 for a
matrix: the smallest tile chosen. A large dense tensor gets larger tiles, as few as leave every
worker `TILES_PER_WORKER` of them; a tensor of at least `MAX_TILE_ELEMENTS` (2048 x 2048) gets tiles of
that many. Products of such tiles run at BLAS's own speed: in 1024 x 1024 tiles a 2048 or 4096 product
stays 8-13% behind one BLAS call on the whole matrices even as a hand-written loop on two threads
(benchmarks/parallel_matmul.py), in 2048 x 2048 tiles within a few percent; 256 x 256 tiles cost a
product of 2048 x 2048 matrices 512 kernel calls, 448 tile additions and the time BLAS takes to warm
up each of them. A plan with fewer tuples than workers runs on one, and BLAS's threads share its
kernels (optimizer/physical_planner.py). The elements are spread over the axes as evenly as powers of
two allow, smallest axes first: an axis shorter than its share is one tile long, and what it leaves
goes to the others. Tensors of different sizes can get different tiles: a kernel over tiles that do
not fit each other is refused with a hint (planner/expression_binder.py), and EINSUM retiles.
"""
from __future__ import annotations

import math
from typing import Sequence

from trdb.config.unit_costs import ELEMENT_COST, TUPLE_COST_FLOPS

OVERHEAD_SHARE = 6.5  # elements per tile, in units of the overhead-equals-work size
TILE_ELEMENTS = 1 << round(math.log2(OVERHEAD_SHARE * TUPLE_COST_FLOPS / ELEMENT_COST))  # 65,536
MAX_TILE_ELEMENTS = 1 << 22  # 2048 x 2048, 16 MiB of float32: BLAS runs a product of such tiles at full speed
TILES_PER_WORKER = 2         # so that a hash partitioning has tiles to spread over every worker
WORKING_TILES = 3            # tiles a worker may always hold: a MATMUL's two operands and its result


def default_tile(shape: Sequence[int], workers: int = 1, elements: int = 0, budget: int = 0,
                 itemsize: int = 4) -> tuple[int, ...]:
    """A tile for a dense tensor of `shape` stored for `workers` workers: about `elements` elements
    (by default `tile_elements`, within what a memory `budget` in bytes holds for every worker), a power
    of two per axis (or the whole axis)."""
    elements = elements or tile_elements(math.prod(shape), workers, fitting(budget, workers, itemsize))
    tile = [1] * len(shape)
    budget, left = float(elements), len(shape)
    for axis in sorted(range(len(shape)), key=lambda a: shape[a]):
        share = max(1, 1 << int(math.log2(max(budget ** (1 / left), 1)) + 1e-9))
        tile[axis] = max(1, min(int(shape[axis]), share))
        budget, left = budget / tile[axis], left - 1
    return tuple(tile)


def tile_elements(total: int, workers: int = 1, most: int = MAX_TILE_ELEMENTS) -> int:
    """How many elements a default tile of a tensor of `total` elements holds: TILE_ELEMENTS, or more for a
    tensor with more than `TILES_PER_WORKER` such tiles per worker, and the most (MAX_TILE_ELEMENTS, or
    fewer where the memory budget says so) for a tensor of at least that many."""
    most = max(TILE_ELEMENTS, min(MAX_TILE_ELEMENTS, most))
    if total >= MAX_TILE_ELEMENTS:
        return most
    return min(most, max(TILE_ELEMENTS, total // (TILES_PER_WORKER * max(1, workers))))


def fitting(budget: int, workers: int, itemsize: int) -> int:
    """The most elements a tile may hold so that every worker's `WORKING_TILES` fit in `budget` bytes (0: no
    budget): a power of four, so that a square matrix keeps square tiles."""
    if budget <= 0:
        return MAX_TILE_ELEMENTS
    elements = max(1, budget // (WORKING_TILES * max(1, workers) * max(1, itemsize)))
    return 1 << (2 * ((elements.bit_length() - 1) // 2))  # the largest power of four not above it
