"""EINSUM tile sizes per index chosen by cost (a simplified EinDecomp).

Every letter of an EINSUM gets one tile size, used by every operand and intermediate result that
has it: smaller than the letter's size makes it relational (a key, handled by joins), equal makes it
dense (inside the tiles). Candidates per letter are the operands' tile sizes for it, the whole
dimension and the powers of two from 64 up to the dimension. An assignment costs, in the
FLOP-equivalents of `einsum_order.py`:

- re-cutting every operand whose tiling differs: `RETILE_COST` for the operator (it reads every
  tile before it writes one: a pipeline breaker), `RETILE_BYTE_COST` per byte of present tiles,
  `TUPLE_COST_FLOPS` per tile read and written, and with several workers the bytes broadcast;
- the cheapest contraction path under that tiling (`einsum_order.best_path`): kernel FLOPs,
  kernel result elements and joined tuples, FLOPs shared by the workers the step's tiles allow.

Re-cut operands keep their sparsity as well as it can be told: coarser tiles are present when any of
the old tiles they cover is (placed at random), finer tiles as often as the old ones. The search is
exhaustive over up to `EXHAUSTIVE` assignments, else coordinate descent from the tiling the operands
already have; none when that tiling costs less than one re-cut (nothing else can win). Ties keep the
operands' tiling, so nothing is retiled unless it pays.
"""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

from trdb.config.unit_costs import EXCHANGE_BYTE_COST, RETILE_BYTE_COST, RETILE_COST, TUPLE_COST_FLOPS
from trdb.optimizer.einsum_order import best_path

SMALLEST_SPLIT = 64        # powers of two from here are candidate tile sizes
EXHAUSTIVE = 1024          # assignments tried exhaustively; beyond, coordinate descent


@dataclass(frozen=True)
class OperandTiling:
    """What the tile choice knows of an operand: its letters, current tile per axis (the whole
    dimension on an axis without a key), which axes have keys, tile density and element size."""

    term: str
    tile: tuple[int, ...]
    keyed: tuple[bool, ...]
    density: float
    itemsize: int


def candidates(letter: str, size: int, operands: list[OperandTiling]) -> list[int]:
    found = {max(1, min(t, size)) for o in operands for c, t in zip(o.term, o.tile) if c == letter}
    found.add(max(1, size))  # an empty axis is cut in tiles of 1
    split = SMALLEST_SPLIT
    while split < size:
        found.add(split)
        split *= 2
    return sorted(found)


def choose_tiles(operands: list[OperandTiling], terms: list[str], output: str, sizes: dict, start: dict,
                 workers: int = 1, fixed: frozenset = frozenset()) -> tuple[dict, float]:
    """(tile per letter, estimated cost): the cheapest assignment found, `start` on ties; the letters
    in `fixed` keep their tile from `start`.

    `terms` are the operands' letters as they enter the pairwise contraction (a letter repeated
    within an operand or needed by no one else already taken away)."""
    return _choose(tuple(operands), tuple(terms), output, tuple(sorted(sizes.items())),
                   tuple(sorted(start.items())), max(1, int(workers)), frozenset(fixed))


@functools.lru_cache(maxsize=256)
def _choose(operands: tuple, terms: tuple, output: str, sizes: tuple, start: tuple, workers: int, fixed: frozenset):
    size = dict(sizes)
    letters = sorted(size)
    options = {c: [dict(start)[c]] if c in fixed else candidates(c, size[c], list(operands)) for c in letters}

    def cost(assignment: dict) -> float:
        return assignment_cost(operands, terms, output, size, assignment, workers)

    best = dict(start)
    best_cost = cost(best)
    if best_cost <= RETILE_COST:
        # any other assignment re-cuts the operand whose tile `start` took for the letter it changes,
        # so it costs more than RETILE_COST: small EINSUMs skip the search (seconds for 7 operands)
        return best, best_cost
    if math.prod(len(options[c]) for c in letters) <= EXHAUSTIVE:
        for values in itertools.product(*(options[c] for c in letters)):
            assignment = dict(zip(letters, values))
            c = cost(assignment)
            if c < best_cost * (1 - 1e-9):
                best, best_cost = assignment, c
        return best, best_cost
    for _ in range(6):  # coordinate descent: one letter at a time until nothing improves
        improved = False
        for letter in letters:
            for value in options[letter]:
                if value == best[letter]:
                    continue
                assignment = {**best, letter: value}
                c = cost(assignment)
                if c < best_cost * (1 - 1e-9):
                    best, best_cost, improved = assignment, c, True
        if not improved:
            break
    return best, best_cost


def needs_retile(operand: OperandTiling, tiles: dict, size: dict) -> bool:
    wanted = tuple(min(tiles[c], size[c]) for c in operand.term)
    return wanted != operand.tile or any(not k and tiles[c] < size[c] for c, k in zip(operand.term, operand.keyed))


def retiled_density(operand: OperandTiling, tiles: dict, size: dict) -> float:
    old = math.prod(operand.tile)
    new = math.prod(min(tiles[c], size[c]) for c in operand.term)
    if new <= old or operand.density >= 1.0:
        return operand.density
    return 1.0 - (1.0 - operand.density) ** (new / old)


def assignment_cost(operands: tuple, terms: tuple, output: str, size: dict, tiles: dict, workers: int) -> float:
    total, densities = 0.0, []
    for operand in operands:
        if not needs_retile(operand, tiles, size):
            densities.append(operand.density)
            continue
        old_tiles = operand.density * math.prod(math.ceil(size[c] / max(t, 1)) for c, t in zip(operand.term, operand.tile))
        density = retiled_density(operand, tiles, size)
        new_tiles = density * math.prod(math.ceil(size[c] / max(tiles[c], 1)) for c in operand.term)
        data = operand.density * math.prod(size[c] for c in operand.term) * operand.itemsize
        total += RETILE_COST + RETILE_BYTE_COST * data + TUPLE_COST_FLOPS * (old_tiles + new_tiles)
        if workers > 1:
            total += EXCHANGE_BYTE_COST * 2 * data  # gathered for the re-cut, then spread again
        densities.append(density)
    letters = tuple(sorted((c, size[c]) for c in size))
    chosen = tuple(sorted((c, min(tiles[c], size[c])) for c in size))
    _, path = best_path(terms, output, letters, chosen, tuple(densities), workers)
    return total + path
