"""Physical rule broadcast_right_join: a join with its right input copied to every partition of the left."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from trdb.plan import logical as lp
from trdb.plan.physical import SINGLE, PhysicalNode

if TYPE_CHECKING:
    from trdb.optimizer.physical_planner import PhysicalPlanner

Want = Optional[tuple[int, ...]]  # the columns the parent would like the output hashed on


def broadcast_right_join(planner: "PhysicalPlanner", plan: lp.Join, want: Want) -> Optional[PhysicalNode]:
    """The right input copied to every partition of the left (INNER and LEFT joins: the left's tuples stay put)."""
    if plan.kind not in ("INNER", "LEFT"):
        return None
    left = planner.single_to_many(planner.build(plan.left, _left_part(want, len(plan.left.schema))))
    if left.partitioning.kind == "single":  # nothing to spread it over (no keys): join in one place
        return planner.join_node(plan, left, planner.gather(planner.build(plan.right, None)), SINGLE)
    right = planner.broadcast(planner.build(plan.right, None))
    return planner.join_node(plan, left, right, left.partitioning)


def _left_part(want: Want, width: int) -> Want:
    """The wanted columns that the left input has (hashing on a subset of them satisfies the parent)."""
    return tuple(c for c in want or () if c < width) or None
