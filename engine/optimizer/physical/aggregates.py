"""Aggregates: run where the input is hashed on group keys, after a repartition, in two phases or in bands."""
from __future__ import annotations

from typing import TYPE_CHECKING

from trdb.optimizer.aggregation import splittable
from trdb.optimizer.group_sizes import rows_per_group
from trdb.optimizer.physical.nodes import Want, names_of, physical_node, spill
from trdb.optimizer.physical_rules import banded_aggregate, two_phase_aggregate
from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan import physical_operators as po
from trdb.plan.physical import SINGLE, Partitioning, PhysicalNode
from trdb.planner.expression_text import column_names, render

if TYPE_CHECKING:
    from trdb.optimizer.physical_planner import PhysicalPlanner


def aggregate(planner: "PhysicalPlanner", plan: lp.Aggregate, want: Want) -> list[PhysicalNode]:
    """The aggregate over each alternative of its input (asked to be hashed on the group keys), and in bands
    where the banded_aggregate rule applies."""
    groups = tuple(e.index for e in plan.group_by if isinstance(e, bx.ColumnIndex))
    simple = len(groups) == len(plan.group_by)
    found = [_aggregate_over(planner, plan, child, groups, simple)
             for child in planner.candidates(plan.input, groups if simple and groups else None)]
    if planner.in_band or "banded_aggregate" in planner.disabled:  # a band's own aggregate is not cut again
        return found
    planner.in_band = True
    try:
        bands = banded_aggregate(planner, plan, want)
    finally:
        planner.in_band = False
    return found if bands is None else found + [bands]


def _aggregate_over(planner: "PhysicalPlanner", plan: lp.Aggregate, child: PhysicalNode,
                    groups: tuple[int, ...], simple: bool) -> PhysicalNode:
    """The aggregate over one placed input: where it is, in two phases (the two_phase_aggregate rule), or
    after a repartition on the group keys (gathered where the groups are not plain columns)."""
    part = child.partitioning
    if part.kind == "single":
        return aggregate_node(planner, plan, child, SINGLE)
    if simple and groups and part.kind == "hash" and all(c in groups for c in part.columns):
        out = tuple(groups.index(c) for c in part.columns)
        return aggregate_node(planner, plan, child, Partitioning("hash", part.count, out))
    estimate = planner.estimator.estimate(plan)
    fewer = not plan.group_by or estimate.rows * planner.workers < child.estimate.rows  # partial results move fewer
    if "two_phase_aggregate" not in planner.disabled and splittable(plan) and fewer:
        return two_phase_aggregate(planner, plan, child, estimate)
    if not (simple and groups):
        return aggregate_node(planner, plan, planner.gather(child), SINGLE)
    moved = planner.repartition(child, groups)
    return aggregate_node(planner, plan, moved, Partitioning("hash", planner.workers, tuple(range(len(groups)))))


def aggregate_node(planner: "PhysicalPlanner", plan: lp.Aggregate, child: PhysicalNode, partitioning: Partitioning,
                   phase: str = "") -> PhysicalNode:
    """The hash aggregate of the placed input; `phase` names a partial or final one of two phases."""
    inputs = column_names(plan.input.schema)
    # a partial aggregate sees part of a group
    group_rows = rows_per_group(plan, planner.key_slot_memo) if not phase else None
    complete = f" (complete at {group_rows} tuples)" if group_rows is not None else ""
    detail = f"{phase}group by [{names_of(plan.schema, range(len(plan.group_by)))}]{complete}: " + \
        ", ".join(f"{c.function}({render(c.arg, inputs) if c.arg is not None else '*'})" for c in plan.calls)
    estimate = planner.estimator.estimate(plan)
    spec = po.HashAggregate(plan.group_by, plan.calls, plan.schema, phase.startswith("partial"), group_rows)
    groups = PhysicalNode(spec, detail, (), plan.schema, partitioning, estimate)
    # groups that do not fit: partial sums spill, about one per input tuple at worst, each a group's size
    spilled = spill(planner, groups, child.estimate.rows * estimate.bytes / max(1.0, estimate.rows),
                    partitioning.count)
    return physical_node(spec, detail, (child,), plan.schema, partitioning, estimate, spilled)
