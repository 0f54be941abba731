"""Physical planning: each logical operator becomes its Volcano operator."""
from __future__ import annotations

from trdb.execution.filter import FilterExec
from trdb.execution.hash_aggregate import HashAggregateExec
from trdb.execution.hash_join import HashJoinExec
from trdb.execution.limit import LimitExec
from trdb.execution.operator import PhysicalOperator
from trdb.execution.projection import ProjectionExec
from trdb.execution.sort import SortExec
from trdb.execution.sql_table_scan import SqlTableScanExec
from trdb.execution.table_scan import TableScanExec
from trdb.execution.union_all import UnionAllExec
from trdb.errors import InternalError
from trdb.planner import logical as lp


def plan_physical(plan: lp.Plan) -> PhysicalOperator:
    builder = _BUILDERS.get(type(plan))
    if builder is None:
        raise InternalError(f"no physical operator for {type(plan).__name__}")
    return builder(plan)


def _scan(plan: lp.Scan) -> PhysicalOperator:
    return TableScanExec(plan.tensor)


def _table_scan(plan: lp.TableScan) -> PhysicalOperator:
    return SqlTableScanExec(plan.table, plan.columns)


def _filter(plan: lp.Filter) -> PhysicalOperator:
    return FilterExec(plan_physical(plan.input), plan.predicate)


def _project(plan: lp.Project) -> PhysicalOperator:
    return ProjectionExec(plan_physical(plan.input), plan.exprs, tuple(c.name for c in plan.schema))


def _join(plan: lp.Join) -> PhysicalOperator:
    return HashJoinExec(plan_physical(plan.left), plan_physical(plan.right), plan.kind, plan.left_keys,
                        plan.right_keys, plan.left.schema, plan.right.schema, plan.residual)


def _aggregate(plan: lp.Aggregate) -> PhysicalOperator:
    return HashAggregateExec(plan_physical(plan.input), plan.group_by, plan.calls, plan.schema)


def _union(plan: lp.UnionAll) -> PhysicalOperator:
    return UnionAllExec(tuple(plan_physical(p) for p in plan.parts))


def _sort(plan: lp.Sort) -> PhysicalOperator:
    return SortExec(plan_physical(plan.input), tuple(k.index for k in plan.keys), plan.descending)


def _limit(plan: lp.Limit) -> PhysicalOperator:
    return LimitExec(plan_physical(plan.input), plan.limit, plan.offset)


_BUILDERS = {lp.Scan: _scan, lp.TableScan: _table_scan, lp.Filter: _filter, lp.Project: _project,
             lp.Join: _join, lp.Aggregate: _aggregate, lp.UnionAll: _union, lp.Sort: _sort, lp.Limit: _limit}
