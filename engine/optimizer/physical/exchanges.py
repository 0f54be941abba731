"""The exchanges every plan needs (gather, repartition, broadcast), and Sort, Limit and Retile, which read through one."""
from __future__ import annotations

from typing import TYPE_CHECKING

from trdb.errors import InternalError
from trdb.optimizer.physical.nodes import Want, names_of, physical_node, spill
from trdb.plan import logical as lp
from trdb.plan import physical_operators as po
from trdb.plan.physical import SINGLE, Partitioning, PhysicalNode

if TYPE_CHECKING:
    from trdb.optimizer.physical_planner import PhysicalPlanner


def gather(planner: "PhysicalPlanner", node: PhysicalNode) -> PhysicalNode:
    """The node's partitions gathered into one (the node itself when it has one)."""
    if node.partitioning.kind == "single":
        return node
    return physical_node(po.Gather(), f"{node.instances} -> 1", (node,), node.schema, SINGLE, node.estimate)


def repartition(planner: "PhysicalPlanner", node: PhysicalNode, columns: tuple[int, ...]) -> PhysicalNode:
    """The node hashed on `columns` over the workers (the node itself when it already is)."""
    if node.partitioning == Partitioning("hash", planner.workers, columns):
        return node
    detail = f"hash: {names_of(node.schema, columns)}, {planner.workers}"
    return physical_node(po.Repartition(columns), detail, (node,), node.schema,
                         Partitioning("hash", planner.workers, columns), node.estimate)


def broadcast(planner: "PhysicalPlanner", node: PhysicalNode) -> PhysicalNode:
    """Every tuple of the node copied to each of the workers."""
    return physical_node(po.Broadcast(), str(planner.workers), (node,), node.schema,
                         Partitioning("replicated", planner.workers), node.estimate)


def single_to_many(planner: "PhysicalPlanner", node: PhysicalNode) -> PhysicalNode:
    """A single-instance input spread over the workers (by a hash of its key columns)."""
    if node.partitioning.kind != "single":
        return node
    keys = tuple(i for i, c in enumerate(node.schema) if c.is_key)
    return repartition(planner, node, keys) if keys else node


# Sort, Limit and Retile read their whole input: through a gather, or a retile with several workers through a
# broadcast (a new tile may draw on the old tiles of any partition); no physical rule places these exchanges.

def _nulls(descending: bool, nulls_first: bool) -> str:
    """EXPLAIN's NULLS FIRST / LAST where a key's NULLs go otherwise than PostgreSQL's default puts them."""
    return "" if nulls_first == descending else " NULLS FIRST" if nulls_first else " NULLS LAST"


def sort(planner: "PhysicalPlanner", plan: lp.Sort, want: Want) -> PhysicalNode:
    """The input gathered and sorted in one place (sorted runs merged where it does not fit)."""
    child = gather(planner, planner.build(plan.input, None))
    positions = tuple(k.index for k in plan.keys)
    detail = ", ".join(f"{plan.schema[p].name}{' DESC' if d else ''}{_nulls(d, n)}"
                       for p, d, n in zip(positions, plan.descending, plan.nulls_first))
    spilled = spill(planner, child, child.estimate.bytes, 1)  # sorted runs, merged
    return physical_node(po.Sort(positions, plan.descending, plan.nulls_first), detail, (child,), plan.schema, SINGLE,
                         planner.estimator.estimate(plan), spilled)


def limit(planner: "PhysicalPlanner", plan: lp.Limit, want: Want) -> PhysicalNode:
    """The input gathered and cut in one place."""
    child = gather(planner, planner.build(plan.input, None))
    detail = f"{plan.limit}" + (f", offset {plan.offset}" if plan.offset else "")
    return physical_node(po.Limit(plan.limit, plan.offset), detail, (child,), plan.schema, SINGLE,
                         planner.estimator.estimate(plan))


def retile(planner: "PhysicalPlanner", plan: lp.Retile, want: Want) -> PhysicalNode:
    """Every instance sees every input tile (a new tile may draw on several) and cuts its own new
    tiles; with one worker the input is gathered."""
    source = plan.input.schema[-1].type
    keys, value = sum(c.is_key for c in plan.input.schema), plan.schema[-1].type
    count = planner.workers
    if count == 1:
        child, partitioning = gather(planner, planner.build(plan.input, None)), SINGLE
    else:
        child = broadcast(planner, planner.build(plan.input, None))
        partitioning = Partitioning("hash", count, tuple(range(len(plan.tile))))
    spec = po.Retile(keys, source.tile, plan.tile, value.extent, value.dtype, count)
    spilled = spill(planner, child, child.estimate.bytes, count)  # it holds its input until it has read it all
    return physical_node(spec, f"{list(source.tile)} -> {list(plan.tile)}", (child,), plan.schema, partitioning,
                         planner.estimator.estimate(plan), spilled)


def check_instances(node: PhysicalNode) -> None:
    """Every operator reads each partition of its inputs exactly once: an input that is not an exchange
    has as many instances as the operator (one fewer would leave a partition unread, one more reread)."""
    for child in node.children:
        if node.exchange is None and child.instances != node.instances:
            raise InternalError(f"physical plan: {node.operator} has {node.instances} instance(s) but its "
                                f"input {child.operator} has {child.instances}")
        check_instances(child)
