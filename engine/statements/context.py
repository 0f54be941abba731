"""What a statement executor works with: the database, catalog, settings, backend and parameters."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Optional

from trdb.catalog.catalog import Catalog
from trdb.config.settings import Settings
from trdb.execution.executor import Execution, start_execution
from trdb.execution.operator import ExecContext
from trdb.execution.state import ExecutionState
from trdb.execution.result import Result
from trdb.kernels.backend import Backend
from trdb.optimizer.common_subplans import CarriedWork, SharedWork
from trdb.optimizer.driver import RuleContext, optimize
from trdb.optimizer.physical_plan import PhysicalNode
from trdb.optimizer.physical_planner import plan_physical
from trdb.parser import ast
from trdb.planner import expressions as bx
from trdb.planner import logical as lp
from trdb.planner.binder import Binder, BoundQuery
from trdb.planner.expression_binder import BindContext, ExpressionBinder
from trdb.statements.limits import check_plan
from trdb.statements.nesting import nesting_guard
from trdb.statements.plan_cache import CachedPlan, PlanCache
from trdb.storage.database import Database


@dataclass
class StatementContext:
    db: Database
    catalog: Catalog
    settings: Settings
    backend: Backend
    bind: BindContext
    interrupted: threading.Event = field(default_factory=threading.Event)
    plans: Optional[PlanCache] = None
    carried: Optional[CarriedWork] = None

    @property
    def text(self) -> str:
        return self.bind.text

    def param(self, node: ast.Param) -> Any:
        return self.bind.param(node)

    def constant(self, node: ast.Expr) -> Any:
        """The value of an expression that must be constant (FILL arguments, SET values)."""
        bound = ExpressionBinder(self.bind, ()).bind(node)
        if not isinstance(bound, bx.Const):
            raise self.bind.fail(node, "a constant is required here")
        return bound.value

    def binder(self) -> Binder:
        return Binder(self.catalog, self.bind)

    def bind_query(self, query: ast.Query) -> BoundQuery:
        with nesting_guard():
            return self.binder().bind_query(query)

    def physical(self, plan: lp.Plan, keep_zero_tuples: bool = False,
                 rules: Optional[RuleContext] = None) -> PhysicalNode:
        """`keep_zero_tuples`: the caller tells a tuple holding zero tiles from an absent one (UPDATE,
        MINIMIZE's gradients, a shared subplan), so the optimizer may not drop such tuples.
        `rules` receives the optimizer rules' timings."""
        rules = rules or RuleContext(self.catalog, self.settings, keep_zero_tuples=keep_zero_tuples)
        rules.interrupted = self.interrupted
        with nesting_guard():
            optimized = optimize(plan, self.settings, self.catalog, context=rules)
            return plan_physical(optimized, self.settings.workers, self.catalog, self.settings.min_parallel_cost)

    def execute_physical(self, node: PhysicalNode) -> tuple[list[tuple], Execution]:
        """Run a physical plan to the end; the execution is returned for its metrics."""
        check_plan(self.settings, node)
        execution = start_execution(node, ExecContext(self.backend, self.catalog, ExecutionState(self.interrupted)),
                                    self.settings)
        with execution, nesting_guard():
            rows = list(execution.rows())
        return rows, execution

    def run_plan(self, plan: lp.Plan, shared: Optional[SharedWork] = None,
                 keep_zero_tuples: bool = False) -> Result:
        """Run a logical plan; subplans it repeats (or that `shared` already computed) run once."""
        shared = shared or self.shared_work()
        with nesting_guard():
            rewritten = shared.rewrite(plan)
        rows = self._rows(rewritten, keep_zero_tuples)
        shared.finish()
        return Result(rows=rows, schema=plan.schema, rowcount=len(rows))

    def shared_work(self) -> SharedWork:
        """Repeated subplans run once; the session's carried work holds the previous statement's."""
        return SharedWork(self._shared_rows, self.carried, (self.catalog.version, self.backend.name))

    def _rows(self, plan: lp.Plan, keep_zero_tuples: bool = False) -> list:
        return self.execute_physical(self.physical(plan, keep_zero_tuples))[0]

    def _shared_rows(self, plan: lp.Plan) -> list:
        # a shared subplan's tuples are read by plans its optimization does not see: keep them all
        return self._rows(plan, keep_zero_tuples=True)

    def run_query(self, query: ast.Query, keep_zero_tuples: bool = False) -> Result:
        return self.run_plan(self.bind_query(query).plan, keep_zero_tuples=keep_zero_tuples)

    def run_query_statement(self, query: ast.Query) -> Result:
        """Run the query of a SELECT statement, through the plan cache when the session has one."""
        key = self._plan_key()
        cached = self.plans.get(key) if self.plans else None
        shared = None
        if cached is None:
            plan = self.bind_query(query).plan
            shared = self.shared_work()
            with nesting_guard():
                rewritten = shared.rewrite(plan)
            cached = CachedPlan(self.physical(rewritten), plan.schema)
            if self.plans and rewritten is plan:  # shared subplans' tuples are this run's only
                self.plans.put(key, cached)
        rows = self.execute_physical(cached.node)[0]
        if shared is not None:
            shared.finish()
        return Result(rows=rows, schema=cached.schema, rowcount=len(rows))

    def _plan_key(self) -> Optional[tuple]:
        if self.plans is None:
            return None
        return PlanCache.key(self.text, self.bind.params, self.settings.snapshot(), self.catalog.version)

