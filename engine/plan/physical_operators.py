"""What each physical operator does, as data: the immutable specs a physical plan carries.

The physical planner builds a tree of `PhysicalNode`s, each holding one of these specs; execution
interprets them (`trdb.execution.interpreter` maps each spec class to the Volcano operator that runs
it). A spec holds only what the operator needs besides its inputs and its partition number, which
the executor supplies per instance. `operator` is the name EXPLAIN prints.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from trdb.plan.types import Schema
from trdb.storage.tensor_meta import TensorMeta


@dataclass(frozen=True)
class OperatorSpec:
    """The base of every spec; `operator` names the Volcano operator (EXPLAIN prints it)."""

    operator: ClassVar[str] = ""


# ------------------------------------------------------------ leaves


@dataclass(frozen=True)
class TensorScan(OperatorSpec):
    """A stored tensor's tiles; with `partitions` > 1 each instance reads those that hash (on `columns`) to it."""

    operator: ClassVar[str] = "TensorScanExec"
    tensor: TensorMeta
    partitions: int = 1
    columns: tuple[int, ...] = ()


@dataclass(frozen=True)
class DenseEinsum(OperatorSpec):
    """`kernel` (an EINSUM over column i = stored tensor i as one array) run once, its result cut into `tile`s
    (each put through `epilogue`, over column 0 = the tile, when there is one); with `threads` > 1 run on row
    blocks of the first array of `block_rows` rows each, which that many threads take in turn, one BLAS
    thread each. Operands not kept whole yet are put together from their tiles on up to `assemblers` threads
    at once."""

    operator: ClassVar[str] = "DenseEinsumExec"
    tensors: tuple[TensorMeta, ...]
    kernel: Any                    # a bound expression (planner.expressions)
    tile: tuple[int, ...]
    threads: int = 1
    block_rows: int = 0            # rows a block, whole row tiles (the last block may be shorter); 0: one call
    epilogue: Any = None           # a bound expression, or None
    assemblers: int = 1


@dataclass(frozen=True)
class OneRow(OperatorSpec):
    """One tuple of no columns."""

    operator: ClassVar[str] = "OneRowExec"


@dataclass(frozen=True)
class RowsScan(OperatorSpec):
    """Tuples already computed (a shared subplan's), spread like a tensor scan."""

    operator: ClassVar[str] = "RowsScanExec"
    rows: Any = field(compare=False, repr=False)  # the list of tuples, shared with the logical plan, never changed
    partitions: int = 1
    columns: tuple[int, ...] = ()


@dataclass(frozen=True)
class TableScan(OperatorSpec):
    """The columns of an ordinary (SQL) table."""

    operator: ClassVar[str] = "TableScanExec"
    table: str
    columns: tuple[str, ...]


# ------------------------------------------------------------ per-tuple and combining operators


@dataclass(frozen=True)
class Filter(OperatorSpec):
    operator: ClassVar[str] = "FilterExec"
    predicate: Any                 # a bound expression (planner.expressions)


@dataclass(frozen=True)
class Project(OperatorSpec):
    operator: ClassVar[str] = "ProjectExec"
    exprs: tuple                   # bound expressions, one per output column


@dataclass(frozen=True)
class HashJoin(OperatorSpec):
    """Builds on the right input, probes with the left; `residual` is checked on each matched pair."""

    operator: ClassVar[str] = "HashJoinExec"
    kind: str                      # INNER, LEFT, RIGHT or FULL
    left_keys: tuple[int, ...]
    right_keys: tuple[int, ...]
    left_schema: Schema
    right_schema: Schema
    residual: Any = None


@dataclass(frozen=True)
class HashAggregate(OperatorSpec):
    """Groups on `group_by` and computes `calls`; a partial aggregate emits states for a final one.
    `group_rows`: a group with that many input tuples is complete (group_sizes.py) and handed on at once."""

    operator: ClassVar[str] = "HashAggregateExec"
    group_by: tuple
    calls: tuple
    schema: Schema
    partial: bool = False
    group_rows: Optional[int] = None


@dataclass(frozen=True)
class Retile(OperatorSpec):
    """Cuts tiles of `old_tile` into tiles of `new_tile`; instance p of `partitions` cuts its share."""

    operator: ClassVar[str] = "RetileExec"
    key_count: int
    old_tile: tuple[int, ...]
    new_tile: tuple[int, ...]
    extent: tuple[Optional[int], ...]
    dtype: Any
    partitions: int = 1


@dataclass(frozen=True)
class UnionAll(OperatorSpec):
    operator: ClassVar[str] = "UnionAllExec"


@dataclass(frozen=True)
class Sort(OperatorSpec):
    operator: ClassVar[str] = "SortExec"
    positions: tuple[int, ...]
    descending: tuple[bool, ...]
    nulls_first: tuple[bool, ...]


@dataclass(frozen=True)
class Limit(OperatorSpec):
    operator: ClassVar[str] = "LimitExec"
    limit: Optional[int]
    offset: int = 0


# ------------------------------------------------------------ exchanges


@dataclass(frozen=True)
class Exchange(OperatorSpec):
    """Runs its input as producers, one per input instance, and has one consumer per output partition."""

    def copies(self, consumers: int) -> int:
        """How many consumers receive each tuple."""
        return 1


@dataclass(frozen=True)
class Repartition(Exchange):
    """Each tuple goes to the consumer its values in `columns` hash to."""

    operator: ClassVar[str] = "RepartitionExec"
    columns: tuple[int, ...]


@dataclass(frozen=True)
class Broadcast(Exchange):
    """Every consumer receives every tuple."""

    operator: ClassVar[str] = "BroadcastExec"

    def copies(self, consumers: int) -> int:
        return consumers


@dataclass(frozen=True)
class Gather(Exchange):
    """Every tuple goes to the one consumer."""

    operator: ClassVar[str] = "GatherExec"
