"""Physical rule co_partitioned_by_right_join: a join whose right input stays where it is hashed, the left moved to it."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from trdb.plan import logical as lp
from trdb.plan.physical import Partitioning, PhysicalNode

if TYPE_CHECKING:
    from trdb.optimizer.physical_planner import PhysicalPlanner

Want = Optional[tuple[int, ...]]  # the columns the parent would like the output hashed on


def co_partitioned_by_right_join(planner: "PhysicalPlanner", plan: lp.Join, want: Want) -> Optional[PhysicalNode]:
    """The right input kept as it is hashed, on some of its join keys, and the left hashed on the keys
    they meet (co_partitioned_join does the reverse, and moves the right input when the left is hashed
    otherwise); None when the right input is not so hashed. The output is placed by those left keys
    (every tuple of an INNER or LEFT join has them)."""
    if not plan.right_keys or plan.kind not in ("INNER", "LEFT"):
        return None
    right = planner.build(plan.right, plan.right_keys)
    meets = dict(zip(plan.right_keys, plan.left_keys))
    hashed = right.partitioning
    if not (hashed.kind == "hash" and hashed.count == planner.workers and all(c in meets for c in hashed.columns)):
        return None
    left_columns = tuple(meets[c] for c in hashed.columns)
    left = planner.repartition(planner.build(plan.left, left_columns), left_columns)
    return planner.join_node(plan, left, right, Partitioning("hash", planner.workers, left_columns))
