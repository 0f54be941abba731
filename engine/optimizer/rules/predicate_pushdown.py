"""predicate_pushdown: key conditions moved below projections, joins, aggregates, sorts and unions.

Only conditions on keys and scalars move (no kernel runs in them and no tile is read), so a moved
condition is evaluated on the same values and never on a tile it was not evaluated on before.
Conditions never go below the side of an outer join that brings in missing tuples, nor below LIMIT.
`IS NOT NULL` on a column that is never NULL (optimizer/nullability.py) is dropped, not moved.
"""
from __future__ import annotations

import dataclasses

from trdb.optimizer.nullability import is_always_true
from trdb.optimizer.plan_rewrite import is_key_predicate
from trdb.plan import expressions as bx
from trdb.plan import logical as lp


def predicate_pushdown(plan: lp.Plan, context) -> lp.Plan:
    """Every Filter's key conjuncts moved as far down the plan as they stay correct."""
    if isinstance(plan, lp.Filter):
        below = predicate_pushdown(plan.input, context)
        # a test that always holds goes: pushed into one copy of a shared subplan it would make it differ
        conditions = [c for c in bx.conjuncts(plan.predicate) if not is_always_true(c, below)]
        if not conditions:
            return below
        pushed = _push(below, conditions)
        return plan if _unchanged(pushed, plan) else pushed
    return lp.with_inputs(plan, [predicate_pushdown(child, context) for child in plan.inputs])


def _unchanged(pushed: lp.Plan, plan: lp.Filter) -> bool:
    if not (isinstance(pushed, lp.Filter) and pushed.input is plan.input):
        return False
    new, old = bx.conjuncts(pushed.predicate), bx.conjuncts(plan.predicate)
    return len(new) == len(old) and all(n is o for n, o in zip(new, old))  # constants may be arrays: no ==


def _filter(plan: lp.Plan, conditions: list) -> lp.Plan:
    return plan if not conditions else lp.Filter(plan, bx.conjunction(conditions))


def _push(plan: lp.Plan, conditions: list) -> lp.Plan:
    """`plan` filtered by `conditions`, with as many of them as possible placed inside it."""
    movable = [c for c in conditions if is_key_predicate(c)]
    if not movable:
        return _filter(plan, conditions)
    stay = [c for c in conditions if not is_key_predicate(c)]
    mover = _MOVERS.get(type(plan))
    if mover is None:
        return _filter(plan, conditions)
    return mover(plan, movable, stay)


def _into_filter(plan: lp.Filter, movable: list, stay: list) -> lp.Plan:
    # the inner filter's conditions were already pushed as far as they go; keep them first
    inner = bx.conjuncts(plan.predicate)
    pushed = _push(plan.input, movable)
    return _filter(pushed, inner + stay)


def _into_project(plan: lp.Project, movable: list, stay: list) -> lp.Plan:
    return _through_columns(plan, plan.exprs, movable, stay)


def _through_columns(plan, sources: tuple, movable: list, stay: list) -> lp.Plan:
    """Conditions moved below a Project or Aggregate whose output column c is `sources[c]`: those that
    read only columns passed through unchanged (input columns) are rewritten onto the input."""
    down, keep = [], []
    for condition in movable:
        used = bx.columns_used(condition)
        if used and all(c < len(sources) and isinstance(sources[c], bx.ColumnIndex) for c in used):
            down.append(bx.remap_columns(condition, {c: sources[c].index for c in used}))
        else:
            keep.append(condition)
    if not down:
        return _filter(plan, movable + stay)
    return _filter(dataclasses.replace(plan, input=_push(plan.input, down)), keep + stay)


def _into_join(plan: lp.Join, movable: list, stay: list) -> lp.Plan:
    width = len(plan.left.schema)
    left, right, keep = [], [], []
    left_keys, right_keys = list(plan.left_keys), list(plan.right_keys)
    for condition in movable:
        used = bx.columns_used(condition)
        if all(c < width for c in used) and plan.kind in ("INNER", "LEFT"):
            left.append(condition)
        elif used and all(c >= width for c in used) and plan.kind == "INNER":
            right.append(bx.shift_columns(condition, -width))
        elif plan.kind == "INNER" and _key_pair(condition, width):
            pair = _key_pair(condition, width)
            left_keys.append(pair[0])
            right_keys.append(pair[1])
        else:
            keep.append(condition)
    if not (left or right or len(left_keys) > len(plan.left_keys)):
        return _filter(plan, movable + stay)
    joined = lp.Join(_push(plan.left, left), _push(plan.right, right), plan.kind, tuple(left_keys),
                     tuple(right_keys), plan.schema, plan.residual)
    return _filter(joined, keep + stay)


def _key_pair(condition: bx.Bound, width: int):
    """(left, right) positions when the condition is `left key = right key` (NULL never matches, as in a join)."""
    if not (isinstance(condition, bx.Compare) and condition.op == "="):
        return None
    a, b = condition.left, condition.right
    if not (isinstance(a, bx.ColumnIndex) and isinstance(b, bx.ColumnIndex) and a.type == b.type):
        return None
    if a.index >= width > b.index:
        a, b = b, a
    return (a.index, b.index - width) if a.index < width <= b.index else None


def _into_aggregate(plan: lp.Aggregate, movable: list, stay: list) -> lp.Plan:
    return _through_columns(plan, plan.group_by, movable, stay)


def _into_sort(plan: lp.Sort, movable: list, stay: list) -> lp.Plan:
    return _filter(dataclasses.replace(plan, input=_push(plan.input, movable)), stay)


def _into_union(plan: lp.UnionAll, movable: list, stay: list) -> lp.Plan:
    return _filter(dataclasses.replace(plan, parts=tuple(_push(p, movable) for p in plan.parts)), stay)


_MOVERS = {lp.Filter: _into_filter, lp.Project: _into_project, lp.Join: _into_join,
           lp.Aggregate: _into_aggregate, lp.Sort: _into_sort, lp.UnionAll: _into_union}
