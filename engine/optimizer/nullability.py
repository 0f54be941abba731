"""Which columns of a plan can never be NULL, so that an `IS NOT NULL` on them can go.

A tensor's keys are never NULL (a stored one's, a DenseEinsum's); a column passed through unchanged
keeps its input's property, as does a join's side that every output tuple has (both sides of an
INNER join, the left of a LEFT join) and a group key. Tuples already computed (a shared subplan's, in memory) are looked at. A
gradient plan tests its lineage keys with `COALESCE(...) IS NOT NULL` (an outer join's missing side
has NULL lineage); where they come from a tensor the test is always true, and dropping it keeps
the plan equal to the forward pass it shares.
"""
from __future__ import annotations

from typing import Optional

from trdb.plan import expressions as bx
from trdb.plan import logical as lp

_MAX_ROWS_LOOKED_AT = 100_000  # tuples of a shared subplan checked for NULL keys (beyond: assume it may be)


def never_null(plan: lp.Plan, column: int) -> bool:
    """Whether column `column` of `plan`'s output is NULL in no tuple it can produce."""
    if isinstance(plan, (lp.TensorScan, lp.DenseEinsum)):
        return True
    if isinstance(plan, lp.RowsScan):
        return _no_null_in(plan.rows, column)
    if isinstance(plan, (lp.Filter, lp.Sort, lp.Limit, lp.Retile)):
        return never_null(plan.input, column)
    if isinstance(plan, lp.Project):
        return _passes_through(plan.input, plan.exprs, column)
    if isinstance(plan, lp.Aggregate):
        return column < len(plan.group_by) and _passes_through(plan.input, plan.group_by, column)
    if isinstance(plan, lp.Join):
        width = len(plan.left.schema)
        if column < width:
            return plan.kind in ("INNER", "LEFT") and never_null(plan.left, column)
        return plan.kind == "INNER" and never_null(plan.right, column - width)
    if isinstance(plan, lp.UnionAll):
        return all(never_null(part, column) for part in plan.parts)
    return False


def is_always_true(condition: bx.Bound, plan: lp.Plan) -> bool:
    """`x IS NOT NULL` (or `COALESCE(x, ...) IS NOT NULL`) where some x is a never-NULL column of `plan`."""
    if not (isinstance(condition, bx.IsNullTest) and condition.negated):
        return False
    tested = condition.arg.args if isinstance(condition.arg, bx.Coalesce) else (condition.arg,)
    return any(isinstance(arg, bx.ColumnIndex) and never_null(plan, arg.index) for arg in tested)


def _passes_through(input: lp.Plan, exprs: tuple, column: int) -> bool:
    expr: Optional[bx.Bound] = exprs[column] if column < len(exprs) else None
    return isinstance(expr, bx.ColumnIndex) and never_null(input, expr.index)


def _no_null_in(rows, column: int) -> bool:
    if not isinstance(rows, list) and getattr(rows, "spilled", True):
        return False  # on disk: reading it back to find out costs more than the test saves
    if isinstance(rows, list):
        return len(rows) <= _MAX_ROWS_LOOKED_AT and all(row[column] is not None for row in rows)
    # a spool in memory: its column batches hold no NULL (execution/column_batch.py), its lists are looked at
    looked_at = 0
    for batch in rows.batches():
        if getattr(batch, "is_tile", None) is not None:
            continue
        looked_at += len(batch)
        if looked_at > _MAX_ROWS_LOOKED_AT or any(row[column] is None for row in batch):
            return False
    return True
