"""Helpers the logical rewrite rules share: rebuilding nodes, substituting expressions, key uniqueness."""
from __future__ import annotations

import dataclasses
from typing import Callable

from trdb.plan import expressions as bx
from trdb.plan import logical as lp


def transform_up(plan: lp.Plan, rewrite: Callable[[lp.Plan], lp.Plan]) -> lp.Plan:
    """Apply `rewrite` to every node, inputs first."""
    return rewrite(lp.with_inputs(plan, [transform_up(child, rewrite) for child in plan.inputs]))


def map_expr(expr: bx.Bound, rewrite: Callable[[bx.Bound], bx.Bound]) -> bx.Bound:
    """Apply `rewrite` to every node of an expression, children first; identity kept when nothing changes."""
    if isinstance(expr, (bx.Call, bx.Logical, bx.Coalesce)):
        args = tuple(map_expr(a, rewrite) for a in expr.args)
        if any(n is not o for n, o in zip(args, expr.args)):
            expr = dataclasses.replace(expr, args=args)
    elif isinstance(expr, (bx.KeyArith, bx.Compare)):
        left, right = map_expr(expr.left, rewrite), map_expr(expr.right, rewrite)
        if left is not expr.left or right is not expr.right:
            expr = dataclasses.replace(expr, left=left, right=right)
    elif isinstance(expr, (bx.Not, bx.InSet, bx.IsNullTest)):
        arg = map_expr(expr.arg, rewrite)
        if arg is not expr.arg:
            expr = dataclasses.replace(expr, arg=arg)
    return rewrite(expr)


def substitute(expr: bx.Bound, exprs: tuple) -> bx.Bound:
    """`expr` with every column reference replaced by the expression that computes it."""
    return map_expr(expr, lambda e: exprs[e.index] if isinstance(e, bx.ColumnIndex) else e)


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
