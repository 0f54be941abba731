"""Physical rule two_phase_aggregate: partial aggregates where the input is, then an exchange and the final one."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from trdb.optimizer.aggregation import final_calls
from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.estimates import Estimate
from trdb.plan.physical import SINGLE, Partitioning, PhysicalNode

if TYPE_CHECKING:
    from trdb.optimizer.physical_planner import PhysicalPlanner


def two_phase_aggregate(planner: "PhysicalPlanner", plan: lp.Aggregate, child: PhysicalNode,
                        estimate: Estimate) -> PhysicalNode:
    """A partial aggregate where the input is, an exchange of its (fewer) partial results by the group keys, and
    the final aggregate: chosen where it moves fewer tuples than repartitioning the input."""
    count = child.partitioning.count
    partial = planner.aggregate_node(plan, child, Partitioning("any", count), "partial, ")
    partial = replace(partial, estimate=replace(estimate, rows=min(estimate.rows * count, child.estimate.rows)))
    width = len(plan.group_by)
    final_plan = lp.Aggregate(plan, tuple(bx.ColumnIndex(i, plan.schema[i].type) for i in range(width)),
                              final_calls(plan), plan.schema)
    if not plan.group_by:
        return planner.aggregate_node(final_plan, planner.gather(partial), SINGLE, "final, ")
    moved = planner.repartition(partial, tuple(range(width)))
    return planner.aggregate_node(final_plan, moved, moved.partitioning, "final, ")
