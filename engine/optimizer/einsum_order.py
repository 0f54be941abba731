"""EINSUM contraction order: candidate pairwise paths, our sparsity-aware cost picks one.

Candidates are left to right, opt_einsum's dense paths (which know nothing of tiles or absent
tiles) and a greedy path by our own step cost (which finds the orders that go through a sparse
operand first). The cost of a pairwise step is, in FLOP-equivalents (one multiply or add of a
BLAS kernel on one core, about 10 ps):

- the FLOPs of its per-tile kernels over the tile pairs the join finds (absent tiles are skipped,
  so tile density scales the work),
- `ELEMENT_COST` per element of every kernel result (written, then summed by the aggregate),
- `TUPLE_COST_FLOPS` per joined tuple (hash probe, Python call of the kernel),

with the first two divided by the workers that can share the step (no more than its tiles). The
unit costs are those of `unit_costs.py`; `einsum_tiling.py` adds the cost of re-cutting operands.
"""
from __future__ import annotations

import functools
import math
from collections import Counter

import opt_einsum

from trdb.config.unit_costs import ELEMENT_COST, FLOPS_PER_MULTIPLY_ADD, TUPLE_COST_FLOPS

EXACT_UP_TO = 6           # opt_einsum's exhaustive search up to this many operands; greedy and dp beyond
SEARCH_UP_TO = 12         # dp and branch-2 grow exponentially: only opt_einsum's greedy (polynomial) beyond


def contraction_order(terms: list[str], output: str, layout, densities: list[float],
                      workers: int = 1) -> list[tuple[int, int]]:
    """Pairs of positions to contract, opt_einsum-style (both removed, the result appended)."""
    if len(terms) < 2:
        return []
    sizes = tuple(sorted(layout.sizes.items()))
    tiles = tuple(sorted(layout.tiles.items()))
    return list(best_path(tuple(terms), output, sizes, tiles, tuple(densities), workers)[0])


@functools.lru_cache(maxsize=4096)
def best_path(terms: tuple, output: str, sizes: tuple, tiles: tuple, densities: tuple,
              workers: int = 1) -> tuple[tuple, float]:
    """(path, cost) of the cheapest candidate path for these terms under this tiling."""
    size, tile = dict(sizes), dict(tiles)
    if len(terms) < 2:
        return (), 0.0
    candidates = list(dense_paths(terms, output, sizes))
    candidates.append(greedy_path(list(terms), output, size, tile, list(densities), workers))
    costed = [(path_cost(list(terms), output, size, tile, list(densities), path, workers), path)
              for path in candidates]
    cost, path = min(costed, key=lambda c: c[0])
    return path, cost


@functools.lru_cache(maxsize=1024)
def dense_paths(terms: tuple, output: str, sizes: tuple) -> tuple:
    """Left to right, then opt_einsum's paths for the dense shapes (they depend on the sizes only)."""
    size = dict(sizes)
    candidates = [tuple((0, 1) for _ in range(len(terms) - 1))]  # left to right, always a candidate
    spec = ",".join(terms) + "->" + output
    shapes = [tuple(size[c] for c in t) for t in terms]
    methods = ["optimal", "greedy"] if len(terms) <= EXACT_UP_TO else \
        ["greedy", "dp", "branch-2"] if len(terms) <= SEARCH_UP_TO else ["greedy"]
    for method in methods:
        try:
            path, _ = opt_einsum.contract_path(spec, *shapes, shapes=True, optimize=method)
        except Exception:  # noqa: BLE001 - a search that fails only removes one candidate
            continue
        if all(len(step) == 2 for step in path):
            candidates.append(tuple(tuple(step) for step in path))
    return tuple(dict.fromkeys(candidates))


def _step_output(terms: list[str], a: int, b: int, output: str) -> str:
    rest = [t for n, t in enumerate(terms) if n not in (a, b)]
    needed = set(output).union(*(set(t) for t in rest))
    return "".join(dict.fromkeys(c for c in terms[a] + terms[b] if c in needed))


def greedy_path(terms: list[str], output: str, size: dict, tile: dict, densities: list[float],
                workers: int = 1) -> tuple:
    """At each step the pair with the cheapest step (pairs that share a letter before those that do not).

    Only pairs that share a letter are costed while there are any, and a step's output letters come
    from letter counts, so a step costs O(pairs), not O(pairs x operands): polynomial for many operands.
    """
    path = []
    while len(terms) > 1:
        counts = Counter(c for t in terms for c in set(t))
        letters = [set(t) for t in terms]
        pairs = [(a, b) for a in range(len(terms)) for b in range(a + 1, len(terms)) if letters[a] & letters[b]]
        best = None
        for a, b in pairs or [(a, b) for a in range(len(terms)) for b in range(a + 1, len(terms))]:
            out = _pair_output(terms[a], terms[b], counts, output)
            cost, density = step_cost(terms[a], terms[b], out, size, tile, densities[a], densities[b], workers)
            rank = (not letters[a] & letters[b], cost)
            if best is None or rank < best[0]:
                best = (rank, a, b, out, density)
        _, a, b, out, density = best
        path.append((a, b))
        terms = [t for n, t in enumerate(terms) if n not in (a, b)] + [out]
        densities = [d for n, d in enumerate(densities) if n not in (a, b)] + [density]
    return tuple(path)


def _pair_output(left: str, right: str, counts: Counter, output: str) -> str:
    """_step_output from letter counts: the letters of the pair that the output or another operand needs."""
    return "".join(dict.fromkeys(c for c in left + right
                                 if c in output or counts[c] > (c in left) + (c in right)))


def path_cost(terms: list[str], output: str, size: dict, tile: dict, densities: list[float], path,
              workers: int = 1) -> float:
    """Estimated cost of contracting `terms` pairwise along `path`."""
    total = 0.0
    for a, b in path:
        out = _step_output(terms, a, b, output)
        cost, result_density = step_cost(terms[a], terms[b], out, size, tile, densities[a], densities[b], workers)
        total += cost
        densities = [d for n, d in enumerate(densities) if n not in (a, b)] + [result_density]
        terms = [t for n, t in enumerate(terms) if n not in (a, b)] + [out]
    return total


def step_cost(left: str, right: str, out: str, size: dict, tile: dict, dl: float, dr: float,
              workers: int = 1) -> tuple[float, float]:
    """(cost, density of the result's tiles) of one join + per-tile einsum + SUM."""
    grid = {c: max(1, math.ceil(size[c] / max(tile[c], 1))) for c in set(left + right)}  # empty axis: one tile
    tiles_l = dl * math.prod(grid[c] for c in left)
    tiles_r = dr * math.prod(grid[c] for c in right)
    shared = set(left) & set(right)
    shared_grid = math.prod(grid[c] for c in shared)
    pairs = tiles_l * tiles_r / shared_grid
    letters = set(left + right)
    kernel = math.prod(min(tile[c], size[c]) for c in letters)
    summed = letters - set(out)
    flops = pairs * kernel * (FLOPS_PER_MULTIPLY_ADD if summed else 1)
    written = pairs * math.prod(min(tile[c], size[c]) for c in out) * ELEMENT_COST
    out_grid = math.prod(grid[c] for c in out)
    per_output = pairs / out_grid if out_grid else pairs
    density = 1.0 - math.exp(-per_output)  # present output tiles, pairs spread at random over the grid
    # the join is co-partitioned on the shared keys or one side is broadcast and the other split by
    # its keys; with no way to tell which side, count the smaller one
    sharing = max(shared_grid if shared_grid > 1 else 1.0, min(tiles_l, tiles_r), 1.0)
    parallel = max(1.0, min(float(workers), sharing))
    return (flops + written) / parallel + TUPLE_COST_FLOPS * pairs, density
