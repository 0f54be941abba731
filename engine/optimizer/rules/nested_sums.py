"""nested_sums: a SUM over the SUMs of another aggregate, grouped by some of its keys, adds the inner input at once.

SUM by (a) of [SUM(x) by (a, b)] is SUM(x) by (a): addition is associative, a group of the outer
aggregate exists exactly where one of the inner's does, and NULLs are skipped either way. A gradient
plan makes such chains: each join sums its sides' gradients by their lineage, so the gradient of an
embedding looked up through three joins is summed by five lineage keys, then three, then two, each
pass over a million tuples when the first one alone would do. Projections between the two that only
pass columns on are looked through. The inner sums must be of columns: a sum of tile products is left to
become a whole-array product (rules/dense_products.py).
"""
from __future__ import annotations

from typing import Optional

from trdb.optimizer.plan_rewrite import transform_up
from trdb.plan import expressions as bx
from trdb.plan import logical as lp


def nested_sums(plan: lp.Plan, context) -> lp.Plan:
    """Every SUM-only aggregate over a SUM-only aggregate whose keys it groups by, as one aggregate."""
    return transform_up(plan, _collapsed)


def _collapsed(plan: lp.Plan) -> lp.Plan:
    if not isinstance(plan, lp.Aggregate) or not plan.calls or \
            not all(isinstance(g, bx.ColumnIndex) for g in plan.group_by) or \
            not all(c.function == "SUM" and isinstance(c.arg, bx.ColumnIndex) for c in plan.calls):
        return plan
    found = _through_projections(plan.input, [g.index for g in plan.group_by] + [c.arg.index for c in plan.calls])
    if found is None:
        return plan
    inner, columns = found
    width = len(inner.group_by)
    groups, sums = columns[:len(plan.group_by)], columns[len(plan.group_by):]
    if any(c >= width for c in groups) or any(c < width for c in sums):
        return plan  # a key that is not one of the inner keys, or a sum of a key
    calls = tuple(lp.AggregateCall("SUM", inner.calls[c - width].arg) for c in sums)
    return lp.Aggregate(inner.input, tuple(inner.group_by[c] for c in groups), calls, plan.schema)


def _through_projections(plan: lp.Plan, columns: list[int]) -> Optional[tuple[lp.Aggregate, list[int]]]:
    """The SUM-only aggregate under `plan` (past projections that pass `columns` on as they are) and where
    `columns` come from in its output; None where there is none."""
    while isinstance(plan, lp.Project):
        exprs = [plan.exprs[c] for c in columns]
        if not all(isinstance(e, bx.ColumnIndex) for e in exprs):
            return None
        columns, plan = [e.index for e in exprs], plan.input
    if not isinstance(plan, lp.Aggregate) or not plan.calls:
        return None
    width = len(plan.group_by)
    # SUM keeps its argument's type: the outer sums' types are those of the inner arguments; sums of columns
    # only (a sum of tile products may become a whole-array product, rules/dense_products.py, which the
    # outer grouping would hide)
    if not all(c.function == "SUM" and isinstance(c.arg, bx.ColumnIndex) and c.arg.type == plan.schema[width + n].type
               for n, c in enumerate(plan.calls)):
        return None
    return plan, columns
