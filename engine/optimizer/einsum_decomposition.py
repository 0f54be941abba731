"""EINSUM in FROM decomposed: operands retiled to one tile size per letter, then pairwise join + aggregate steps."""
from __future__ import annotations

import math
from dataclasses import dataclass

from trdb.config.settings import Settings
from trdb.kernels import einsum_spec
from trdb.optimizer import einsum_tiling
from trdb.optimizer.einsum_order import contraction_order
from trdb.optimizer.einsum_tiling import OperandTiling, choose_tiles
from trdb.planner import logical as lp
from trdb.planner.einsum_terms import Layout, Term, contract, finish, operand_term
from trdb.planner.retile import retile, tensor_columns


@dataclass(frozen=True)
class Operand:
    """A bound operand: its plan, key positions, and per tile axis the nominal tile and logical size."""

    plan: lp.Plan
    keys: list
    tile: tuple[int, ...]
    shape: tuple[int, ...]
    itemsize: int = 8


def parse_spec(ctx, item) -> None:
    """The spec's text checked before its operands are bound (numpy's grammar; shapes come later)."""
    try:
        inputs, _ = einsum_spec.parse_text(item.spec)
    except einsum_spec.SpecError as e:
        raise ctx.fail(item, f"EINSUM spec {item.spec!r}: {e}") from None
    problem = einsum_spec.operand_count_problem(inputs, len(item.operands))
    if problem:
        raise ctx.fail(item, f"EINSUM spec {item.spec!r} {problem}")


def resolve_spec(ctx, item, operands: list[Operand]) -> einsum_spec.Resolved:
    """The spec fitted to the operands' logical shapes: '...' spelled out in letters (over key axes or
    tile axes alike), a letter of size 1 against a larger one given a letter of its own (a broadcast join)."""
    try:
        return einsum_spec.resolve(item.spec, [o.shape for o in operands])
    except einsum_spec.SpecError as e:
        raise ctx.fail(item, f"EINSUM spec {item.spec!r}: {e}") from None


def bind_operand(binder, node, position: int) -> Operand:
    plan = binder.bind_from_item(node)
    keys, value = tensor_columns(plan)
    if value is None:
        raise binder.ctx.fail(node, f"EINSUM operand {position} must be a tensor relation: key columns, "
                                    f"then one tensor column")
    column = plan.schema[value].type
    rank = len(column.tile)
    if len(keys) > rank:
        raise binder.ctx.fail(node, f"EINSUM operand {position} has {len(keys)} keys but {rank}-d tiles")
    shape = tuple(e if e is not None else (t if axis >= len(keys) else None)
                  for axis, (t, e) in enumerate(zip(column.tile, column.extent)))
    if None in shape:
        raise binder.ctx.fail(node, f"EINSUM operand {position}: its logical shape is not known; "
                                    f"store it as a tensor first")
    # an empty axis (size 0) is cut in tiles of 1, none of them present
    tile = tuple(max(1, min(t, n) if axis < len(keys) else n) for axis, (t, n) in enumerate(zip(column.tile, shape)))
    return Operand(plan, keys, tile, shape, column.dtype.itemsize)


def largest_operand_layout(inputs: list[str], operands: list[Operand], sizes: dict, output: str = "",
                           workers: int = 1) -> Layout:
    """Per letter, the tile of the largest operand that has it (so the most data keeps its tiling)."""
    tiles: dict[str, int] = {}
    ranked = sorted(range(len(operands)), key=lambda i: -math.prod(operands[i].shape))
    for i in ranked:
        for letter, t in zip(inputs[i], operands[i].tile):
            tiles.setdefault(letter, t)
    return Layout(sizes, tiles)


def cost_layout(inputs: list[str], operands: list[Operand], sizes: dict, output: str = "",
                workers: int = 1) -> Layout:
    """Per letter, the tile size of the cheapest plan (optimizer/einsum_tiling.py), starting from and
    on ties keeping the tiling of the largest operands."""
    start = largest_operand_layout(inputs, operands, sizes).tiles
    tilings = [OperandTiling(term, o.tile, tuple(axis < len(o.keys) for axis in range(len(term))),
                             density(o.plan), o.itemsize) for term, o in zip(inputs, operands)]
    terms = [own_letters(term, keep_letters(inputs, output, i)) for i, term in enumerate(inputs)]
    tiles, _ = choose_tiles(tilings, terms, output, sizes, start, workers)
    return Layout(sizes, tiles)


choose_layout = cost_layout  # the rule bind_einsum uses; benchmarks compare largest_operand_layout


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


def bind_workers(binder) -> int:
    """The workers the plan will run on: the binder's when it knows them, else the `workers` default."""
    for source in (binder, binder.ctx):
        workers = getattr(source, "workers", None)
        if isinstance(workers, int) and workers > 0:
            return workers
    return Settings().get("workers")  # a plan bound outside a session


def bind_einsum(binder, item) -> lp.Plan:
    """EINSUM('spec', X, ...): a tree of join + aggregate steps in the cheapest contraction order."""
    parse_spec(binder.ctx, item)
    operands = [bind_operand(binder, node, n) for n, node in enumerate(item.operands, start=1)]
    resolved = resolve_spec(binder.ctx, item, operands)
    inputs, output = list(resolved.inputs), resolved.output
    workers = bind_workers(binder)
    layout = choose_layout(inputs, operands, resolved.size, output, workers)
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
    return finish(term, output, layout, item.alias or "einsum")
