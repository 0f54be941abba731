"""EINSUM contraction order: opt_einsum proposes pairwise paths, our sparsity-aware cost picks one.

The cost of a pairwise step is the FLOPs of its per-tile kernels over the tile pairs the join
finds (absent tiles are skipped, so tile density scales the work) plus a per-tuple overhead for
every joined pair; the unit costs below are the only constants.
"""
from __future__ import annotations

import functools
import math

import opt_einsum

TUPLE_COST_FLOPS = 2e4    # Python overhead of one joined tuple (hash probe, kernel call), in FLOP-equivalents
FLOPS_PER_MULTIPLY_ADD = 2
EXACT_UP_TO = 6           # opt_einsum's exhaustive search up to this many operands; greedy and dp beyond


def contraction_order(terms: list[str], output: str, layout, densities: list[float]) -> list[tuple[int, int]]:
    """Pairs of positions to contract, opt_einsum-style (both removed, the result appended)."""
    if len(terms) < 2:
        return []
    sizes = tuple(sorted(layout.sizes.items()))
    tiles = tuple(sorted(layout.tiles.items()))
    return list(_best_path(tuple(terms), output, sizes, tiles, tuple(densities)))


@functools.lru_cache(maxsize=256)
def _best_path(terms: tuple, output: str, sizes: tuple, tiles: tuple, densities: tuple) -> tuple:
    size, tile = dict(sizes), dict(tiles)
    candidates = [tuple((0, 1) for _ in range(len(terms) - 1))]  # left to right, always a candidate
    spec = ",".join(terms) + "->" + output
    shapes = [tuple(size[c] for c in t) for t in terms]
    methods = ["optimal", "greedy"] if len(terms) <= EXACT_UP_TO else ["greedy", "dp", "branch-2"]
    for method in methods:
        try:
            path, _ = opt_einsum.contract_path(spec, *shapes, shapes=True, optimize=method)
        except Exception:  # noqa: BLE001 - a search that fails only removes one candidate
            continue
        if all(len(step) == 2 for step in path):
            candidates.append(tuple(tuple(step) for step in path))
    return min(candidates, key=lambda path: path_cost(list(terms), output, size, tile, list(densities), path))


def path_cost(terms: list[str], output: str, size: dict, tile: dict, densities: list[float], path) -> float:
    """Estimated cost of contracting `terms` pairwise along `path`."""
    total = 0.0
    for a, b in path:
        left, right = terms[a], terms[b]
        rest = [t for n, t in enumerate(terms) if n not in (a, b)]
        needed = set(output).union(*(set(t) for t in rest))
        out = "".join(dict.fromkeys(c for c in left + right if c in needed))
        cost, result_density = step_cost(left, right, out, size, tile, densities[a], densities[b])
        total += cost
        densities = [d for n, d in enumerate(densities) if n not in (a, b)] + [result_density]
        terms = rest + [out]
    return total


def step_cost(left: str, right: str, out: str, size: dict, tile: dict, dl: float, dr: float) -> tuple[float, float]:
    """(cost, density of the result's tiles) of one join + per-tile einsum + SUM."""
    grid = {c: math.ceil(size[c] / tile[c]) for c in set(left + right)}
    tiles_l = dl * math.prod(grid[c] for c in left)
    tiles_r = dr * math.prod(grid[c] for c in right)
    shared = set(left) & set(right)
    pairs = tiles_l * tiles_r / math.prod(grid[c] for c in shared) if shared else tiles_l * tiles_r
    letters = set(left + right)
    kernel = math.prod(min(tile[c], size[c]) for c in letters)
    summed = letters - set(out)
    flops = pairs * kernel * (FLOPS_PER_MULTIPLY_ADD if summed else 1)
    out_grid = math.prod(grid[c] for c in out)
    per_output = pairs / out_grid if out_grid else pairs
    density = 1.0 - math.exp(-per_output)  # present output tiles, pairs spread at random over the grid
    return flops + TUPLE_COST_FLOPS * pairs, density
