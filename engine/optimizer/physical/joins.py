"""Joins: each placed by the physical rules that apply (optimizer/physical_rules/), or in one partition."""
from __future__ import annotations

from typing import TYPE_CHECKING

from trdb.optimizer.physical.nodes import Want, physical_node, spill
from trdb.optimizer.physical_rules import JOIN_RULES
from trdb.plan import logical as lp
from trdb.plan import physical_operators as po
from trdb.plan.physical import SINGLE, Partitioning, PhysicalNode

if TYPE_CHECKING:
    from trdb.optimizer.physical_planner import PhysicalPlanner


def join(planner: "PhysicalPlanner", plan: lp.Join, want: Want) -> list[PhysicalNode]:
    """The join as each physical rule not disabled places it (the cheapest is kept above); with one worker,
    or where no rule applies, in one partition."""
    if planner.workers == 1:
        left, right = planner.build(plan.left, None), planner.build(plan.right, None)
        left, right = planner.gather(left), planner.gather(right)
        return [join_node(planner, plan, left, right, SINGLE)]
    found = [node for rule in JOIN_RULES if rule.__name__ not in planner.disabled
             and (node := rule(planner, plan, want)) is not None]
    return found or [_join_in_one_place(planner, plan)]


def _join_in_one_place(planner: "PhysicalPlanner", plan: lp.Join) -> PhysicalNode:
    """Both inputs gathered and joined in one partition: where no physical rule places the join."""
    left = planner.gather(planner.build(plan.left, None))
    right = planner.gather(planner.build(plan.right, None))
    return join_node(planner, plan, left, right, SINGLE)


def join_node(planner: "PhysicalPlanner", plan: lp.Join, left: PhysicalNode, right: PhysicalNode,
              partitioning: Partitioning) -> PhysicalNode:
    """The hash join of the placed inputs, its output spread as `partitioning` says."""
    detail = f"{plan.kind}: {_condition(plan)}"
    spec = po.HashJoin(plan.kind, plan.left_keys, plan.right_keys, plan.left.schema, plan.right.schema,
                       plan.residual)
    # a build side that does not fit: both inputs go to partition files (a grace hash join)
    spilled = spill(planner, right, left.estimate.bytes + right.estimate.bytes, partitioning.count)
    return physical_node(spec, detail, (left, right), plan.schema, partitioning, planner.estimator.estimate(plan),
                         spilled)


def _condition(plan: lp.Join) -> str:
    """The join's key equalities as EXPLAIN shows them ("cross" where it has none)."""
    return ", ".join(f"{plan.left.schema[l].name} = {plan.right.schema[r].name}"
                     for l, r in zip(plan.left_keys, plan.right_keys)) or "cross"
