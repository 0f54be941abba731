"""kernel_fusion: two consecutive Projects become one, so the inner per-tuple results are never materialized.

The outer expressions are rewritten over the inner Project's input by substituting each inner
expression for the column that held it. Only done when no kernel would then run more often: every
inner expression that runs a kernel is used at most once by the outer Project.
"""
from __future__ import annotations

from collections import Counter

from trdb.optimizer.plan_rewrite import contains_call, substitute, transform_up
from trdb.planner import expressions as bx
from trdb.planner import logical as lp


def kernel_fusion(plan: lp.Plan, context) -> lp.Plan:
    """Every Project over a Project merged into one where that duplicates no kernel."""
    return transform_up(plan, _fuse)


def _fuse(plan: lp.Plan) -> lp.Plan:
    if not (isinstance(plan, lp.Project) and isinstance(plan.input, lp.Project)):
        return plan
    inner = plan.input
    uses: Counter = Counter()
    for expr in plan.exprs:
        _count_uses(expr, uses)
    if any(uses[i] > 1 and not _cheap(e) for i, e in enumerate(inner.exprs)):
        return plan
    exprs = tuple(substitute(e, inner.exprs) for e in plan.exprs)
    return lp.Project(inner.input, exprs, plan.schema)


def _count_uses(expr: bx.Bound, uses: Counter) -> None:
    if isinstance(expr, bx.ColumnIndex):
        uses[expr.index] += 1
    for child in bx.children(expr):
        _count_uses(child, uses)


def _cheap(expr: bx.Bound) -> bool:
    """Evaluated again at no real cost: column references, constants and key arithmetic."""
    return not contains_call(expr)
