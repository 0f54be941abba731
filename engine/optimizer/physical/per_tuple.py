"""Filter, Project and UNION ALL: operators that run where their inputs are, keeping or mapping their placement."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from trdb.optimizer.banded_aggregate import band_text
from trdb.optimizer.group_sizes import key_slots
from trdb.optimizer.physical.nodes import Want, physical_node
from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan import physical_operators as po
from trdb.plan.physical import SINGLE, Partitioning, PhysicalNode
from trdb.planner.expression_text import assignments, column_names, render

if TYPE_CHECKING:
    from trdb.optimizer.physical_planner import PhysicalPlanner


def filter_rows(planner: "PhysicalPlanner", plan: lp.Filter, want: Want) -> list[PhysicalNode]:
    """The filter over each alternative of its input, partitioned as it is."""
    names = column_names(plan.input.schema)
    detail = band_text(plan.predicate, names) or render(plan.predicate, names)
    return [physical_node(po.Filter(plan.predicate), detail, (child,), plan.schema, child.partitioning,
                          planner.estimator.estimate(plan))
            for child in planner.candidates(plan.input, want)]


def project(planner: "PhysicalPlanner", plan: lp.Project, want: Want) -> list[PhysicalNode]:
    """The projection over each alternative of its input, asked for the wanted columns it passes through."""
    sources = {i: e.index for i, e in enumerate(plan.exprs) if isinstance(e, bx.ColumnIndex)}
    child_want = tuple(sources[c] for c in want) if want and all(c in sources for c in want) else None
    return [_project_node(planner, plan, child, sources) for child in planner.candidates(plan.input, child_want)]


def _project_node(planner: "PhysicalPlanner", plan: lp.Project, child: PhysicalNode,
                  sources: dict[int, int]) -> PhysicalNode:
    """The projection of one input, hashed on the output columns that hold its input's hash columns."""
    partitioning = child.partitioning
    if partitioning.kind == "hash":
        outputs = {v: k for k, v in sorted(sources.items(), reverse=True)}
        mapped = tuple(outputs[c] if c in outputs else _equal_output(planner, plan.input, c, outputs)
                       for c in partitioning.columns)
        partitioning = replace(partitioning, columns=mapped) if None not in mapped else \
            Partitioning("any", partitioning.count)
    detail = assignments(plan.exprs, plan.schema, plan.input.schema)
    return physical_node(po.Project(plan.exprs), detail, (child,), plan.schema, partitioning,
                         planner.estimator.estimate(plan))


def _equal_output(planner: "PhysicalPlanner", source: lp.Plan, column: int, outputs: dict[int, int]) -> Optional[int]:
    """The output column of a projection that holds the same key as its input `column`, which it drops
    (a key an inner join made equal to it, a lineage copy of it: the same key slot, so the same values
    in every tuple); None when none does."""
    slots = key_slots(source, planner.key_slot_memo)
    if slots is None or column not in slots.at:
        return None
    slot = slots.at[column]
    return next((outputs[c] for c in sorted(slots.at) if slots.at[c] == slot and c in outputs), None)


def union_all(planner: "PhysicalPlanner", plan: lp.UnionAll, want: Want) -> PhysicalNode:
    """The parts side by side: spread as they are, or all gathered where one of them is in one place."""
    parts = [planner.build(p, None) for p in plan.parts]
    if any(p.partitioning.kind == "single" for p in parts):
        parts = [planner.gather(p) for p in parts]
        partitioning = SINGLE
    else:
        partitioning = Partitioning("any", planner.workers)
    return physical_node(po.UnionAll(), "", tuple(parts), plan.schema, partitioning, planner.estimator.estimate(plan))
