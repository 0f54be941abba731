"""Physical rule co_partitioned_join: a join with both inputs hashed on the join keys (a FULL join's only parallel form)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from trdb.plan import logical as lp
from trdb.plan.physical import Partitioning, PhysicalNode

if TYPE_CHECKING:
    from trdb.optimizer.physical_planner import PhysicalPlanner

Want = Optional[tuple[int, ...]]  # the columns the parent would like the output hashed on


def co_partitioned_join(planner: "PhysicalPlanner", plan: lp.Join, want: Want) -> Optional[PhysicalNode]:
    """Both inputs hashed on the join keys: the left kept where it is already hashed on some of them, else both
    moved. None for a join without keys (nothing to hash on)."""
    if not plan.left_keys:
        return None
    left = planner.build(plan.left, plan.left_keys)
    right = planner.build(plan.right, plan.right_keys)
    pairs = dict(zip(plan.left_keys, plan.right_keys))
    if not (left.partitioning.kind == "hash" and left.partitioning.count == planner.workers
            and all(c in pairs for c in left.partitioning.columns)):
        left = planner.repartition(left, plan.left_keys)
    right_columns = tuple(pairs[c] for c in left.partitioning.columns)
    right = planner.repartition(right, right_columns)
    # unmatched right tuples of a FULL join carry NULL left keys: no key placement holds
    partitioning = Partitioning("any", planner.workers) if plan.kind == "FULL" else left.partitioning
    return planner.join_node(plan, left, right, partitioning)
