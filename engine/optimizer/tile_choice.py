"""The tile trdb chooses when a statement leaves TILE out: the cost model's idea of a good tile.

A tuple costs `TUPLE_COST_FLOPS` (a hash probe, a kernel call: ~10 us) and an element of a kernel
result `ELEMENT_COST` (~1 ns), so a tile of `TUPLE_COST_FLOPS / ELEMENT_COST` (10,000) elements
spends as long on overhead as on its cheapest (elementwise) work. A good tile has several times
that: `OVERHEAD_SHARE` keeps the per-tuple overhead of an elementwise kernel near 15% (and far less
for MATMUL, whose work grows faster than its elements), which gives 65,536 elements, 256 x 256 for a
matrix. The elements are spread over the axes as evenly as powers of two allow, smallest axes first:
an axis shorter than its share is one tile long, and what it leaves goes to the others.
"""
from __future__ import annotations

import math
from typing import Sequence

from trdb.config.unit_costs import ELEMENT_COST, TUPLE_COST_FLOPS

OVERHEAD_SHARE = 6.5  # elements per tile, in units of the overhead-equals-work size
TILE_ELEMENTS = 1 << round(math.log2(OVERHEAD_SHARE * TUPLE_COST_FLOPS / ELEMENT_COST))  # 65,536


def default_tile(shape: Sequence[int], elements: int = TILE_ELEMENTS) -> tuple[int, ...]:
    """A tile for a tensor of `shape`: about `elements` elements, a power of two per axis (or the axis)."""
    tile = [1] * len(shape)
    budget, left = float(elements), len(shape)
    for axis in sorted(range(len(shape)), key=lambda a: shape[a]):
        share = max(1, 1 << int(math.log2(max(budget ** (1 / left), 1)) + 1e-9))
        tile[axis] = max(1, min(int(shape[axis]), share))
        budget, left = budget / tile[axis], left - 1
    return tuple(tile)
