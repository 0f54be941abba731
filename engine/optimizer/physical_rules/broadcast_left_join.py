"""Physical rule broadcast_left_join: an inner join with its left input copied to every partition of the right."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from trdb.plan import logical as lp
from trdb.plan.physical import SINGLE, PhysicalNode

if TYPE_CHECKING:
    from trdb.optimizer.physical_planner import PhysicalPlanner

Want = Optional[tuple[int, ...]]  # the columns the parent would like the output hashed on


def broadcast_left_join(planner: "PhysicalPlanner", plan: lp.Join, want: Want) -> Optional[PhysicalNode]:
    """The left input copied to every partition of the right (INNER joins only)."""
    if plan.kind != "INNER":
        return None
    width = len(plan.left.schema)
    right_want = tuple(c - width for c in want or () if c >= width) or None
    right = planner.single_to_many(planner.build(plan.right, right_want))
    if right.partitioning.kind == "single":
        return planner.join_node(plan, planner.gather(planner.build(plan.left, None)), right, SINGLE)
    left = planner.broadcast(planner.build(plan.left, None))
    partitioning = right.partitioning
    if partitioning.kind == "hash":
        partitioning = replace(partitioning, columns=tuple(c + width for c in partitioning.columns))
    return planner.join_node(plan, left, right, partitioning)
