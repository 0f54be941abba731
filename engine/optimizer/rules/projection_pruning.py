"""projection_pruning: columns that nothing above reads are dropped, so their kernels never run.

Needed columns flow from the root (all of its columns) down. A Project keeps only the expressions
read above it; an Aggregate only the calls read above it; Filters, Sorts, Limits and inner joins
pass the need on (plus the columns they read themselves). Leaves and outer joins keep every
column: an outer join shapes its zero tiles after the partner side's tiles.
"""
from __future__ import annotations

import dataclasses

from trdb.plan import expressions as bx
from trdb.plan import logical as lp

Mapping = dict  # old column position -> new position, for every column kept


def projection_pruning(plan: lp.Plan, context) -> lp.Plan:
    """The plan with unread Project columns and aggregate calls removed; the root keeps every column."""
    pruned, _ = _prune(plan, set(range(len(plan.schema))))
    return pruned


def _identity(plan: lp.Plan) -> Mapping:
    return {i: i for i in range(len(plan.schema))}


def _prune(plan: lp.Plan, needed: set) -> tuple[lp.Plan, Mapping]:
    pruner = _PRUNERS.get(type(plan))
    if pruner is None:  # leaves, unions: every column stays, the inputs keep all of theirs
        return _keep_all(plan), _identity(plan)
    return pruner(plan, needed)


def _keep_all(plan: lp.Plan) -> lp.Plan:
    return lp.with_inputs(plan, [_prune(child, set(range(len(child.schema))))[0] for child in plan.inputs])


def _remap(expr: bx.Bound, mapping: Mapping) -> bx.Bound:
    used = bx.columns_used(expr)
    if all(mapping[c] == c for c in used):
        return expr
    return bx.remap_columns(expr, {c: mapping[c] for c in used})


def _project(plan: lp.Project, needed: set) -> tuple[lp.Plan, Mapping]:
    kept = sorted(needed) or [_cheapest(plan.exprs)][:len(plan.exprs)]  # keep one column, if it has any
    child_needed = set().union(*(bx.columns_used(plan.exprs[i]) for i in kept))
    child, child_map = _prune(plan.input, child_needed)
    if len(kept) == len(plan.exprs) and child is plan.input and all(v == k for k, v in child_map.items()):
        return plan, _identity(plan)
    exprs = tuple(_remap(plan.exprs[i], child_map) for i in kept)
    schema = tuple(plan.schema[i] for i in kept)
    return lp.Project(child, exprs, schema), {old: new for new, old in enumerate(kept)}


def _cheapest(exprs: tuple) -> int:
    for position, expr in enumerate(exprs):
        if isinstance(expr, (bx.ColumnIndex, bx.Const)) and not hasattr(expr.type, "tile"):
            return position
    return 0


def _filter(plan: lp.Filter, needed: set) -> tuple[lp.Plan, Mapping]:
    child, mapping = _prune(plan.input, needed | bx.columns_used(plan.predicate))
    if child is plan.input:
        return plan, mapping
    return lp.Filter(child, _remap(plan.predicate, mapping)), mapping


def _pass_through(plan, needed: set) -> tuple[lp.Plan, Mapping]:
    """Sort and Limit: the same columns as their input."""
    keys = set().union(*(bx.columns_used(k) for k in getattr(plan, "keys", ())))
    child, mapping = _prune(plan.input, needed | keys)
    if child is plan.input:
        return plan, mapping
    if isinstance(plan, lp.Sort):
        return lp.Sort(child, tuple(_remap(k, mapping) for k in plan.keys), plan.descending, plan.nulls_first), mapping
    return dataclasses.replace(plan, input=child), mapping


def _join(plan: lp.Join, needed: set) -> tuple[lp.Plan, Mapping]:
    if plan.kind != "INNER":
        return _keep_all(plan), _identity(plan)
    width = len(plan.left.schema)
    wanted = set(needed) | set(plan.left_keys) | {width + k for k in plan.right_keys}
    if plan.residual is not None:
        wanted |= bx.columns_used(plan.residual)
    left, left_map = _prune(plan.left, {c for c in wanted if c < width})
    right, right_map = _prune(plan.right, {c - width for c in wanted if c >= width})
    if left is plan.left and right is plan.right:
        return plan, _identity(plan)
    new_width = len(left.schema)
    mapping = {**left_map, **{width + old: new_width + new for old, new in right_map.items()}}
    residual = None if plan.residual is None else _remap(plan.residual, mapping)
    joined = lp.Join(left, right, plan.kind, tuple(left_map[k] for k in plan.left_keys),
                     tuple(right_map[k] for k in plan.right_keys), left.schema + right.schema, residual)
    return joined, mapping


def _aggregate(plan: lp.Aggregate, needed: set) -> tuple[lp.Plan, Mapping]:
    groups = len(plan.group_by)
    calls = [i for i in range(len(plan.calls)) if groups + i in needed]
    if plan.calls and not calls:
        calls = [_cheapest_call(plan.calls)]
    child_needed = set().union(*(bx.columns_used(g) for g in plan.group_by),
                               *(bx.columns_used(plan.calls[i].arg) for i in calls if plan.calls[i].arg is not None))
    child, child_map = _prune(plan.input, child_needed)
    if len(calls) == len(plan.calls) and child is plan.input:
        return plan, _identity(plan)
    new_calls = tuple(plan.calls[i] if plan.calls[i].arg is None else
                      dataclasses.replace(plan.calls[i], arg=_remap(plan.calls[i].arg, child_map)) for i in calls)
    schema = plan.schema[:groups] + tuple(plan.schema[groups + i] for i in calls)
    aggregate = lp.Aggregate(child, tuple(_remap(g, child_map) for g in plan.group_by), new_calls, schema)
    mapping = {i: i for i in range(groups)}
    mapping.update({groups + old: groups + new for new, old in enumerate(calls)})
    return aggregate, mapping


def _cheapest_call(calls: tuple) -> int:
    return next((i for i, c in enumerate(calls) if c.arg is None), 0)


_PRUNERS = {lp.Project: _project, lp.Filter: _filter, lp.Sort: _pass_through, lp.Limit: _pass_through,
            lp.Join: _join, lp.Aggregate: _aggregate}
