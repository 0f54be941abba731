"""EINSUM steps as relational plans: each contraction is a join on shared keys, a per-tile einsum and a SUM."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.types import KEY, Column, TensorType
from trdb.planner.kernel_calls import call


@dataclass(frozen=True)
class Layout:
    """The decomposition of every letter: its logical size and its tile size (relational when smaller)."""

    sizes: dict
    tiles: dict

    def relational(self, letter: str) -> bool:
        return self.tiles[letter] < self.sizes[letter]

    def grid(self, letter: str) -> int:
        return -(-self.sizes[letter] // self.tiles[letter])


@dataclass(frozen=True)
class Term:
    """An intermediate tensor: a plan whose tile axes are `letters`, with a key column per relational letter.

    `keys` pairs each relational letter with its key position (a repeated letter appears twice);
    the tile is the last column.
    """

    plan: lp.Plan
    letters: str
    keys: tuple[tuple[str, int], ...]

    @property
    def value(self) -> int:
        return len(self.plan.schema) - 1


def operand_term(plan: lp.Plan, letters: str, key_positions: list[int], layout: Layout) -> Term:
    """An operand (keys mapped to its leading axes, then one tile) as a Term keyed by its relational
    letters (renamed after them, so plans read like the spec); dense letters' keys are dropped."""
    axes = [axis for axis, c in enumerate(letters) if axis < len(key_positions) and layout.relational(c)]
    value = plan.schema[-1]
    exprs = tuple(bx.ColumnIndex(key_positions[a], KEY) for a in axes) + (bx.ColumnIndex(len(plan.schema) - 1,
                                                                                         value.type),)
    schema = tuple(Column(letters[a], KEY) for a in axes) + (Column("v", value.type),)
    return Term(lp.Project(plan, exprs, schema), letters, tuple((letters[a], n) for n, a in enumerate(axes)))


def contract(terms: list[Term], output: str, layout: Layout, alias: Optional[str] = None) -> Term:
    """One step: join the terms on their shared relational letters, einsum each tuple's tiles into
    `output`'s letters, and SUM over the relational letters that disappear (a plain projection when none do)."""
    plan, offsets = _joined(terms)
    positions = [(letter, offset + p) for term, offset in zip(terms, offsets) for letter, p in term.keys]
    plan = _diagonal_filter(plan, positions)
    values = [bx.ColumnIndex(offset + t.value, plan.schema[offset + t.value].type) for t, offset in zip(terms, offsets)]
    spec = ",".join(t.letters for t in terms) + "->" + output
    if len(terms) == 1 and terms[0].letters == output:
        kernel = values[0]
    else:
        kernel = call("EINSUM", spec, *values)
    value_type = TensorType(kernel.type.dtype, tuple(layout.tiles[c] for c in output),
                            tuple(layout.sizes[c] for c in output))
    first = {}
    for letter, p in positions:
        first.setdefault(letter, p)
    out_keys = [c for c in output if layout.relational(c)]
    group = tuple(bx.ColumnIndex(first[c], KEY) for c in out_keys)
    schema = tuple(Column(c, KEY, alias) for c in out_keys) + (Column("v", value_type, alias),)
    summed = {letter for letter, _ in positions} - set(output)
    if summed:
        result = lp.Aggregate(plan, group, (lp.AggregateCall("SUM", kernel),), schema)
    else:
        result = lp.Project(plan, group + (replace(kernel, type=value_type) if isinstance(kernel, bx.Call)
                                           else kernel,), schema)
    return Term(result, output, tuple((c, n) for n, c in enumerate(out_keys)))


def _joined(terms: list[Term]) -> tuple[lp.Plan, list[int]]:
    """The terms joined left to right on their shared relational letters; each term's column offset."""
    plan, offsets, seen = terms[0].plan, [0], dict(terms[0].keys)
    for term in terms[1:]:
        pairs = [(seen[letter], p) for letter, p in term.keys if letter in seen]
        left_keys, right_keys = tuple(a for a, _ in pairs), tuple(b for _, b in pairs)
        offsets.append(len(plan.schema))
        for letter, p in term.keys:
            seen.setdefault(letter, offsets[-1] + p)
        plan = lp.Join(plan, term.plan, "INNER", left_keys, right_keys, plan.schema + term.plan.schema)
    return plan, offsets


def _diagonal_filter(plan: lp.Plan, positions: list[tuple[str, int]]) -> lp.Plan:
    """Keys of one letter that the join did not equate (a letter repeated within a term) must agree."""
    first: dict[str, int] = {}
    conditions = []
    for letter, p in positions:
        if letter in first and not _joined_pair(plan, first[letter], p):
            conditions.append(bx.Compare("=", bx.ColumnIndex(first[letter], KEY), bx.ColumnIndex(p, KEY)))
        first.setdefault(letter, p)
    if not conditions:
        return plan
    return lp.Filter(plan, bx.conjunction(conditions))


def _joined_pair(plan: lp.Plan, a: int, b: int) -> bool:
    if not isinstance(plan, lp.Join):
        return False
    width = len(plan.left.schema)
    return any((l, width + r) == (a, b) for l, r in zip(plan.left_keys, plan.right_keys))


def finish(term: Term, output: str, layout: Layout, alias: Optional[str]) -> lp.Plan:
    """The result relation: a key per output letter in order (0 where the letter is one tile), then `v`."""
    keys = dict(term.keys)
    exprs = tuple(bx.ColumnIndex(keys[c], KEY) if c in keys else bx.Const(0, KEY) for c in output)
    value = term.plan.schema[term.value]
    exprs += (bx.ColumnIndex(term.value, value.type),)
    schema = tuple(Column(c, KEY, alias) for c in output) + (Column("v", value.type, alias),)
    return lp.Project(term.plan, exprs, schema)
