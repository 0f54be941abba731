"""kernel_fusion: two consecutive Projects become one, so the inner per-tuple results are never materialized.

The outer expressions are rewritten over the inner Project's input by substituting each inner
expression for the column that held it. Only done when no kernel would then run more often: every
inner expression that runs a kernel is used at most once by the outer Project.

Likewise a SUM over a Project's MATMUL column (a gradient's `X^T @ dY` summed over X's row tiles)
takes the product into the Aggregate: SUM(MATMUL(...)) adds each product into the group's sum
(GEMM with beta = 1), no product tile is made, moved or added.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable

from trdb.optimizer.plan_rewrite import contains_call, transform_up
from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.expressions import substitute


def kernel_fusion(plan: lp.Plan, context) -> lp.Plan:
    """Every Project over a Project merged into one where that duplicates no kernel, and SUMs over a
    Project's products taken into the Aggregate."""
    return transform_up(plan, lambda node: _fuse_sum(_fuse(node)))


def wide_product_sums(plan: lp.Plan) -> lp.Plan:
    """Only the SUMs over a Project's products that are wider than their operands taken into the Aggregate (and
    the Projects merged that this needs): for a MINIMIZE step's gradients before its plans share projections
    (statements/minimize.py), where the product column would be computed in a projection the loss shares, and
    made for every tuple (a weight's gradient over rows of 1 x 64: each row's 64 x 64 outer product, 16 KB a
    row, where the sum of them is one GEMM)."""
    return transform_up(plan, lambda node: _fuse_sum(_fuse(node) if _feeds_wide_sum(node) else node, _widening))


def _feeds_wide_sum(plan: lp.Plan) -> bool:
    """A Project over a Project whose merged expressions hold a product wider than its operands: merged, so that
    the Aggregate above can take the product in (`_fuse_sum`, which checks that it is summed there)."""
    return isinstance(plan, lp.Project) and isinstance(plan.input, lp.Project) and \
        any(isinstance(e, bx.Call) and e.function.name == "MATMUL" and _widening_product(e)
            for e in (substitute(x, plan.input.exprs) for x in plan.exprs))


def _widening(call: lp.AggregateCall) -> bool:
    return _product_sum(call) and _widening_product(call.arg)


def _widening_product(product: bx.Call) -> bool:
    """A product of matrix tiles whose result has more elements than its two operands together."""
    tiles = [getattr(arg.type, "tile", ()) for arg in product.args]
    if len(tiles) != 2 or not all(len(t) == 2 and all(isinstance(n, int) for n in t) for t in tiles):
        return False
    (m, k), (_, p) = tiles
    return m * p > m * k + k * p


def _fuse_sum(plan: lp.Plan, wanted: Callable[[lp.AggregateCall], bool] = lambda call: True) -> lp.Plan:
    if not (isinstance(plan, lp.Aggregate) and isinstance(plan.input, lp.Project)):
        return plan
    inner = plan.input
    uses: Counter = Counter()
    for expr in plan.group_by + tuple(call.arg for call in plan.calls if call.arg is not None):
        _count_uses(expr, uses)
    if any(uses[i] > 1 and not _cheap(e) for i, e in enumerate(inner.exprs)):
        return plan
    group_by = tuple(substitute(e, inner.exprs) for e in plan.group_by)
    calls = tuple(call if call.arg is None else lp.AggregateCall(call.function, substitute(call.arg, inner.exprs))
                  for call in plan.calls)
    if not all(_cheap(e) for e in group_by) or not any(_product_sum(call) and wanted(call) for call in calls):
        return plan
    if any(contains_call(call.arg) and not _product_sum(call) for call in calls if call.arg is not None):
        return plan  # another kernel would move into the aggregate: its tiles stay made by the Project
    return lp.Aggregate(inner.input, group_by, calls, plan.schema)


def _product_sum(call: lp.AggregateCall) -> bool:
    return call.function == "SUM" and isinstance(call.arg, bx.Call) and call.arg.function.name == "MATMUL"


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
