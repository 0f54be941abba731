"""The physical plan: immutable nodes holding their operator's spec, partitioning and estimates."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from trdb.config.unit_costs import EXCHANGE_BYTE_COST, SPILL_BYTE_COST, TUPLE_COST_FLOPS
from trdb.plan.estimates import Estimate
from trdb.plan.physical_operators import Exchange, OperatorSpec
from trdb.plan.types import Schema


@dataclass(frozen=True)
class Partitioning:
    """How a node's output is spread over its instances.

    single: one instance; hash: tuples with equal values in `columns` are in the same instance
    (partition = hash(values) % count); any: spread with no key placement; replicated: every
    instance holds every tuple (the consumer side of a broadcast).
    """

    kind: str
    count: int = 1
    columns: tuple[int, ...] = ()

    def __str__(self) -> str:
        if self.kind == "hash":
            return f"hash({', '.join(f'#{c}' for c in self.columns)}) x{self.count}"
        return self.kind if self.kind == "single" else f"{self.kind} x{self.count}"


SINGLE = Partitioning("single")


@dataclass(frozen=True)
class PhysicalNode:
    """One operator of the plan: `spec` says what it does, as data (physical_operators.py); execution
    builds a running instance per partition from it.

    An exchange node (its spec an `Exchange`) runs its child as producers, one per child instance,
    and has one consumer instance per partition of its own. `cost` is the estimated bytes moved by
    the exchanges in this subtree, plus its expected spill and reads from DuckDB in exchange-byte
    equivalents; `spill` is the bytes this operator is expected to write to spill files (and read back:
    its state does not fit its share of memory_limit); `read_cost` is the cost (unit_costs.py) of
    reading a scan's tiles from DuckDB, counted for every time a plan reads them.
    """

    CHILDREN: ClassVar[tuple[str, ...]] = ("children",)  # read by plan/logical.children, as a logical node's

    spec: OperatorSpec
    detail: str
    children: tuple["PhysicalNode", ...]
    schema: Schema
    partitioning: Partitioning
    estimate: Estimate
    cost: float = 0.0
    spill: float = 0.0
    read_cost: float = 0.0

    @property
    def operator(self) -> str:
        """The operator's name, as EXPLAIN prints it."""
        return self.spec.operator

    @property
    def exchange(self) -> Optional[Exchange]:
        """The exchange's spec when this node is one, else None."""
        return self.spec if isinstance(self.spec, Exchange) else None

    @property
    def instances(self) -> int:
        return self.partitioning.count

    @property
    def own_cost(self) -> float:
        """This operator's estimated cost alone (config/unit_costs.py): FLOPs and written elements,
        tuples, bytes moved."""
        if self.exchange is None:
            return self.estimate.cost + self.spill * SPILL_BYTE_COST + self.read_cost
        # an exchange shares its input's estimate: its own cost is passing the tuples and moving them
        return self.estimate.rows * TUPLE_COST_FLOPS + self.moved_bytes * EXCHANGE_BYTE_COST

    @property
    def moved_bytes(self) -> float:
        """Estimated bytes this exchange moves (0 for other operators)."""
        if self.exchange is None:
            return 0.0
        return self.children[0].estimate.bytes * self.exchange.copies(self.instances)
