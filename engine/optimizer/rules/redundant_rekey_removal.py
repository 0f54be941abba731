"""redundant_rekey_removal: a Project that passes every input column through unchanged, in order, is removed.

Subqueries, CTEs and views add such projections (they only rename columns under an alias); names
are resolved by the binder, so after binding the projection does nothing but cost a pass over the tuples.
"""
from __future__ import annotations

from trdb.optimizer.plan_rewrite import transform_up
from trdb.plan import expressions as bx
from trdb.plan import logical as lp


def redundant_rekey_removal(plan: lp.Plan, context) -> lp.Plan:
    """Every identity Project replaced by its input."""
    return transform_up(plan, _remove_identity)


def _remove_identity(plan: lp.Plan) -> lp.Plan:
    return plan.input if isinstance(plan, lp.Project) and is_identity(plan) else plan


def is_identity(plan: lp.Project) -> bool:
    """Column i is input column i for every column, with the same type (dtype, tile and extent)."""
    source = plan.input.schema
    if len(plan.exprs) != len(source):
        return False
    return all(isinstance(e, bx.ColumnIndex) and e.index == i and out.type == src.type
               for i, (e, out, src) in enumerate(zip(plan.exprs, plan.schema, source)))
