"""A bound EINSUM (`Einsum`) decomposed: operands retiled to one tile size per letter, then join + aggregate steps."""
from __future__ import annotations

from dataclasses import dataclass

from trdb.optimizer import einsum_tiling
from trdb.optimizer.einsum_order import contraction_order
from trdb.optimizer.einsum_tiling import OperandTiling, choose_tiles
from trdb.plan import logical as lp
from trdb.planner.einsum_binding import largest_operand_tiles
from trdb.planner.einsum_terms import Layout, Term, contract, finish, operand_term
from trdb.planner.retile import retile


@dataclass(frozen=True)
class Operand:
    """A bound operand: its plan, key positions, and per tile axis the nominal tile and logical size."""

    plan: lp.Plan
    keys: list
    tile: tuple[int, ...]
    shape: tuple[int, ...]
    itemsize: int = 8


def largest_operand_layout(inputs: list[str], operands: list[Operand], sizes: dict, output: str = "",
                           workers: int = 1) -> Layout:
    """Per letter, the tile of the largest operand that has it (so the most data keeps its tiling)."""
    return Layout(sizes, largest_operand_tiles(inputs, operands))


def cost_layout(inputs: list[str], operands: list[Operand], sizes: dict, output: str = "",
                workers: int = 1) -> Layout:
    """Per letter, the tile size of the cheapest plan (optimizer/einsum_tiling.py), starting from and
    on ties keeping the tiling of the largest operands; the output's letters keep that tiling (it is
    the result's type, bound before the plan is chosen)."""
    start = largest_operand_layout(inputs, operands, sizes).tiles
    tilings = [OperandTiling(term, o.tile, tuple(axis < len(o.keys) for axis in range(len(term))),
                             density(o.plan), o.itemsize) for term, o in zip(inputs, operands)]
    terms = [own_letters(term, keep_letters(inputs, output, i)) for i, term in enumerate(inputs)]
    tiles, _ = choose_tiles(tilings, terms, output, sizes, start, workers, fixed=frozenset(output))
    return Layout(sizes, tiles)


choose_layout = cost_layout  # the layout `decompose` uses; benchmarks compare largest_operand_layout


def keep_letters(inputs: list[str], output: str, i: int) -> set:
    """The letters of operand i that the output or another operand needs."""
    return set(output).union(*(set(t) for j, t in enumerate(inputs) if j != i))


def own_letters(term: str, keep: set) -> str:
    """An operand's letters once repeated ones are taken on the diagonal and unneeded ones summed."""
    return "".join(dict.fromkeys(c for c in term if c in keep))


def prepare(operand: Operand, term: str, keep: set, layout: Layout) -> Term:
    """The operand as a Term: retiled where its tiling disagrees with the layout; a letter repeated in
    it taken on the diagonal, and a letter no one else needs summed away."""
    wanted = tuple(layout.tiles[c] for c in term)
    plan, keys = operand.plan, operand.keys
    needs_key = any(axis >= len(keys) and layout.relational(c) for axis, c in enumerate(term))
    if wanted != operand.tile or needs_key:
        plan = retile(plan, wanted)
        keys = list(range(len(term)))
    result = operand_term(plan, term, keys, layout)
    own = own_letters(term, keep)
    if own != term:
        result = contract([result], own, layout)
    return result


def density(plan: lp.Plan) -> float:
    """The fraction of an operand's tiles that are present, when a stored tensor's statistics tell."""
    while isinstance(plan, (lp.Project, lp.Filter, lp.Retile)):
        plan = plan.input
    if isinstance(plan, lp.TensorScan) and plan.tensor.max_tuples:
        return min(1.0, plan.tensor.tuple_count / plan.tensor.max_tuples)
    return 1.0


def retiled_density(operand: Operand, term: str, layout: Layout) -> float:
    tiling = OperandTiling(term, operand.tile, (True,) * len(term), density(operand.plan), operand.itemsize)
    return einsum_tiling.retiled_density(tiling, layout.tiles, layout.sizes)


def decompose(node: lp.Einsum, workers: int) -> lp.Plan:
    """A bound EINSUM as a tree of join + aggregate steps in the cheapest contraction order."""
    operands = [Operand(plan, list(d.keys), d.tile, d.shape, d.itemsize) for plan, d in zip(node.operands, node.details)]
    inputs, output = list(node.spec.inputs), node.spec.output
    layout = choose_layout(inputs, operands, node.spec.size, output, workers)
    terms = [prepare(operand, term, keep_letters(inputs, output, i), layout)
             for i, (operand, term) in enumerate(zip(operands, inputs))]
    densities = [density(o.plan) if tuple(layout.tiles[c] for c in term) == o.tile else
                 retiled_density(o, term, layout) for o, term in zip(operands, inputs)]
    for a, b in contraction_order([t.letters for t in terms], output, layout, densities, workers):
        left, right = terms[a], terms[b]
        rest = [t for n, t in enumerate(terms) if n not in (a, b)]
        needed = set(output).union(*(set(t.letters) for t in rest))
        letters = output if not rest else "".join(dict.fromkeys(c for c in left.letters + right.letters
                                                                if c in needed))
        terms = rest + [contract([left, right], letters, layout)]
    (term,) = terms
    if term.letters != output:
        term = contract([term], output, layout)
    return finish(term, output, layout, node.schema[-1].qualifier)
