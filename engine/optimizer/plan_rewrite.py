"""Helpers the logical rewrite rules share: rebuilding nodes, finding kernel calls, key uniqueness (substituting
expressions is plan/expressions.py's, which the backward pass uses too)."""
from __future__ import annotations

from typing import Callable

from trdb.plan import expressions as bx
from trdb.plan import logical as lp


def transform_up(plan: lp.Plan, rewrite: Callable[[lp.Plan], lp.Plan]) -> lp.Plan:
    """Apply `rewrite` to every node, inputs first."""
    return rewrite(lp.with_inputs(plan, [transform_up(child, rewrite) for child in plan.inputs]))


def contains_call(expr: bx.Bound) -> bool:
    return isinstance(expr, bx.Call) or any(contains_call(c) for c in bx.children(expr))


def is_key_predicate(expr: bx.Bound) -> bool:
    """A predicate on keys and scalars only: no kernel runs and no tile is read."""
    if contains_call(expr):
        return False
    return not _reads_tensor(expr)


def _reads_tensor(expr: bx.Bound) -> bool:
    if isinstance(expr, bx.ColumnIndex):
        return hasattr(expr.type, "tile")
    return any(_reads_tensor(c) for c in bx.children(expr))


def unique_keys(plan: lp.Plan) -> list[frozenset]:
    """Column sets on which the relation is known to have no two tuples with the same values."""
    if isinstance(plan, lp.TensorScan):
        return [frozenset(range(len(plan.tensor.keys)))]
    if isinstance(plan, lp.DenseEinsum):
        return [frozenset(range(len(plan.schema) - 1))]
    if isinstance(plan, (lp.Filter, lp.Sort, lp.Limit)):
        return unique_keys(plan.input)
    if isinstance(plan, lp.Aggregate):
        return [frozenset(range(len(plan.group_by)))]
    if isinstance(plan, lp.Project):
        outputs: dict[int, int] = {}
        for position, expr in enumerate(plan.exprs):
            if isinstance(expr, bx.ColumnIndex):
                outputs.setdefault(expr.index, position)
        return [frozenset(outputs[c] for c in key) for key in unique_keys(plan.input)
                if all(c in outputs for c in key)]
    return []
