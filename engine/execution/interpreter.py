"""The physical plan's interpreter: one table from each operator spec to the Volcano operator that runs it.

Both executors (local threads in executor.py, Ray in ray/execution.py) build their operators here,
one instance per partition; a spec with no entry is a broken invariant, not a user error.
"""
from __future__ import annotations

from typing import Callable

from trdb.errors import InternalError
from trdb.execution.exchange.broadcast import BroadcastExec
from trdb.execution.exchange.channel import Router
from trdb.execution.exchange.gather import GatherExec
from trdb.execution.exchange.repartition import RepartitionExec
from trdb.execution.operators.dense_einsum import DenseEinsumExec
from trdb.execution.operators.filter import FilterExec
from trdb.execution.operators.hash_aggregate import HashAggregateExec
from trdb.execution.operators.hash_join import HashJoinExec
from trdb.execution.operators.limit import LimitExec
from trdb.execution.operators.one_row import OneRowExec
from trdb.execution.operators.operator import PhysicalOperator
from trdb.execution.operators.project import ProjectExec
from trdb.execution.operators.retile import RetileExec
from trdb.execution.operators.rows_scan import RowsScanExec
from trdb.execution.operators.sort import SortExec
from trdb.execution.operators.table_scan import TableScanExec
from trdb.execution.operators.tensor_scan import TensorScanExec
from trdb.execution.operators.union_all import UnionAllExec
from trdb.plan import physical_operators as po
from trdb.plan.physical import PhysicalNode

# An operator's entry builds it from (spec, its input operators, partition); an exchange's entry is
# the class of its consumer side, built from (channel, partition, detail), whose `router(spec)`
# routes its producers' batches.
OPERATORS: dict[type, Callable] = {
    po.TensorScan: lambda s, inputs, p: TensorScanExec(s.tensor, p, s.partitions, s.columns),
    po.DenseEinsum: lambda s, inputs, p: DenseEinsumExec(s.tensors, s.kernel, s.tile, s.threads, s.block_rows,
                                                         s.epilogue, s.assemblers),
    po.OneRow: lambda s, inputs, p: OneRowExec(),
    po.RowsScan: lambda s, inputs, p: RowsScanExec(s.rows, p, s.partitions, s.columns),
    po.TableScan: lambda s, inputs, p: TableScanExec(s.table, s.columns),
    po.Filter: lambda s, inputs, p: FilterExec(inputs[0], s.predicate),
    po.Project: lambda s, inputs, p: ProjectExec(inputs[0], s.exprs),
    po.HashJoin: lambda s, inputs, p: HashJoinExec(inputs[0], inputs[1], s.kind, s.left_keys, s.right_keys,
                                                   s.left_schema, s.right_schema, s.residual),
    po.HashAggregate: lambda s, inputs, p: HashAggregateExec(inputs[0], s.group_by, s.calls, s.schema, s.partial,
                                                                 s.group_rows),
    po.Retile: lambda s, inputs, p: RetileExec(inputs[0], s.key_count, s.old_tile, s.new_tile, s.extent, s.dtype,
                                               p, s.partitions),
    po.UnionAll: lambda s, inputs, p: UnionAllExec(tuple(inputs)),
    po.Sort: lambda s, inputs, p: SortExec(inputs[0], s.positions, s.descending, s.nulls_first),
    po.Limit: lambda s, inputs, p: LimitExec(inputs[0], s.limit, s.offset),
    po.Repartition: RepartitionExec,
    po.Broadcast: BroadcastExec,
    po.Gather: GatherExec,
}


def _entry(spec: po.OperatorSpec) -> Callable:
    entry = OPERATORS.get(type(spec))
    if entry is None:
        raise InternalError(f"no operator runs {type(spec).__name__} ({spec.operator or 'unnamed'}): "
                            "add it to execution/interpreter.py")
    return entry


def operator_for(node: PhysicalNode, inputs: list[PhysicalOperator], partition: int) -> PhysicalOperator:
    """The running operator of a non-exchange node for one partition, over its input operators."""
    if node.exchange is not None:
        raise InternalError(f"{node.operator} is an exchange: it reads a channel, not input operators")
    return _entry(node.spec)(node.spec, inputs, partition)


def exchange_for(node: PhysicalNode, channel, partition: int) -> PhysicalOperator:
    """The consumer side of an exchange node for one partition, reading `channel`."""
    return _exchange_class(node.spec)(channel, partition, node.detail)


def router_for(spec: po.Exchange) -> Router:
    """The function that sends each tuple of a batch to its consumer partitions."""
    return _exchange_class(spec).router(spec)


def _exchange_class(spec: po.OperatorSpec) -> type:
    if not isinstance(spec, po.Exchange):
        raise InternalError(f"{spec.operator or type(spec).__name__} is not an exchange")
    return _entry(spec)
