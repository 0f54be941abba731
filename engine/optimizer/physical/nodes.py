"""A physical node built with its cost (bytes moved, expected spill, reads from DuckDB), as every family builds one."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from trdb.config.unit_costs import CACHED_SCAN_BYTE_COST, EXCHANGE_BYTE_COST, SCAN_BYTE_COST, SPILL_BYTE_COST
from trdb.plan import physical_operators as po
from trdb.plan.estimates import Estimate
from trdb.plan.physical import Partitioning, PhysicalNode

if TYPE_CHECKING:
    from trdb.optimizer.physical_planner import PhysicalPlanner

Want = Optional[tuple[int, ...]]  # the columns the parent would like the output hashed on


def physical_node(spec: po.OperatorSpec, detail: str, children: tuple, schema, partitioning: Partitioning,
                  estimate: Estimate, spill: float = 0.0, read_cost: float = 0.0) -> PhysicalNode:
    """The node, its cost that of its children plus its own moved bytes, spill and reads (in exchange bytes)."""
    node = PhysicalNode(spec, detail, children, schema, partitioning, estimate, spill=spill, read_cost=read_cost)
    own = node.moved_bytes + (spill * SPILL_BYTE_COST + read_cost) / EXCHANGE_BYTE_COST
    return replace(node, cost=sum(c.cost for c in children) + own)


def spill(planner: "PhysicalPlanner", state: PhysicalNode, spilled: float, instances: int) -> float:
    """Expected bytes an operator writes to spill files (and reads back once): `spilled` bytes in all, when
    the state it holds (the estimated output of node `state`, spread over `instances`) exceeds its share."""
    held = state.estimate.bytes / max(1, instances) if state.partitioning.kind != "replicated" \
        else state.estimate.bytes
    return float(spilled) if held > planner.memory_share else 0.0


def read_cost(planner: "PhysicalPlanner", nbytes: float) -> float:
    """The cost of one read of a stored tensor of `nbytes`: from DuckDB, decoded, when it streams (it is
    larger than half the budget, as the buffer pool decides); from the buffer pool when it is cached
    there (then only its first read costs as much, the same in every plan, so it is not counted)."""
    streams = nbytes > planner.memory_budget / 2
    return nbytes * (SCAN_BYTE_COST if streams else CACHED_SCAN_BYTE_COST)


def memory_budget(catalog) -> float:
    """The bytes operators of the catalog's database may hold (its memory manager's budget)."""
    database = getattr(catalog, "db", None)
    return float(database.file.memory.budget) if database is not None else math.inf


def names_of(schema, positions) -> str:
    """The columns at `positions`, as EXPLAIN names them."""
    return ", ".join(schema[p].name for p in positions)
