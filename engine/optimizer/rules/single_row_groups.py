"""single_row_groups: an aggregate whose every group has at most one input tuple becomes a projection.

`SUM`, `MIN` and `MAX` of one tuple are its value, so when the keys its input is unique on
(optimizer/group_sizes.py) show that no group can have two tuples, the aggregate only costs a
blocking pass, a repartition by its keys and a copy of each tile. A gradient plan has many such:
`d_out @ W2ᵀ` grouped by the hidden layer's tile keys, each hidden tile meeting the one tile of W2
whose row it is, and the sum of a parameter's contributions when each tile has one.
"""
from __future__ import annotations

from trdb.optimizer.group_sizes import rows_per_group
from trdb.optimizer.plan_rewrite import transform_up
from trdb.plan import logical as lp

_VALUE_OF_ONE = ("SUM", "MIN", "MAX")  # of a single tuple: its value, of the same type


def single_row_groups(plan: lp.Plan, context) -> lp.Plan:
    """Every grouped SUM/MIN/MAX aggregate whose groups have at most one tuple, as a projection."""
    memo: dict = {}
    return transform_up(plan, lambda node: _as_projection(node, memo))


def _as_projection(plan: lp.Plan, memo: dict) -> lp.Plan:
    if not isinstance(plan, lp.Aggregate) or not plan.group_by or not plan.calls:
        return plan
    width = len(plan.group_by)
    if not all(call.function in _VALUE_OF_ONE and call.arg is not None
               and call.arg.type == plan.schema[width + n].type for n, call in enumerate(plan.calls)):
        return plan
    if rows_per_group(plan, memo) != 1:
        return plan
    return lp.Project(plan.input, plan.group_by + tuple(call.arg for call in plan.calls), plan.schema)
