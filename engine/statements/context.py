"""What a statement executor works with: the database, catalog, settings, backend, parameters and the query pipeline."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Union

from trdb.catalog.catalog import Catalog
from trdb.config.settings import Settings
from trdb.errors import DataError
from trdb.execution.executor import Execution
from trdb.execution.result import Result
from trdb.execution.spool import RowSpool
from trdb.kernels.backend import Backend
from trdb.optimizer.driver import RuleContext
from trdb.parser import ast
from trdb.pipeline.plan_cache import CachedPlan, PlanCache
from trdb.pipeline.plan_memo import PlanMemo
from trdb.pipeline.query import Pipeline
from trdb.pipeline.shared_work import CarriedWork, SharedWork
from trdb.pipeline.step_program import StepRecording, run_query_program
from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.physical import PhysicalNode
from trdb.planner.binder import Binder, BoundQuery
from trdb.planner.edge_tiles import EDGE_TILES_HINT
from trdb.planner.expression_binder import BindContext, ExpressionBinder
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
    plan_memo: Optional[PlanMemo] = None  # the connection's memo of physical plans (MINIMIZE's, queries')

    def __post_init__(self) -> None:
        self.pipeline = Pipeline(self.catalog, self.settings, self.backend, self.bind, self.interrupted, self.carried)

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

    def bind_table(self, ref: ast.TableRef) -> lp.Plan:
        return self.pipeline.bind_table(ref)

    def bind_query(self, query: ast.Query) -> BoundQuery:
        return self.pipeline.bind(query)

    def physical(self, plan: lp.Plan, keep_zero_tuples: bool = False,
                 rules: Optional[RuleContext] = None) -> PhysicalNode:
        return self.pipeline.physical(plan, keep_zero_tuples, rules)

    def execute_physical(self, node: PhysicalNode) -> tuple[Union[list, RowSpool], Execution]:
        """The tuples of a physical plan (a list, or a spool when they spilled) and its execution."""
        with run_time_hints():
            spool, execution = self.pipeline.execute(node)
        return spool.contents(), execution

    def run_plan(self, plan: lp.Plan, shared: Optional[SharedWork] = None,
                 keep_zero_tuples: bool = False) -> Result:
        """Run a logical plan; subplans it repeats (or that `shared` already computed) run once."""
        with run_time_hints():
            run = self.pipeline.run(plan, shared, keep_zero_tuples)
        return Result(rows=run.rows, schema=plan.schema, rowcount=len(run.rows), spool=run.spool)

    def shared_work(self) -> SharedWork:
        return self.pipeline.shared_work()

    def run_query(self, query: ast.Query, keep_zero_tuples: bool = False) -> Result:
        return self.run_plan(self.bind_query(query).plan, keep_zero_tuples=keep_zero_tuples)

    def run_query_statement(self, query: ast.Query) -> Result:
        """Run the query of a SELECT statement, through the plan cache when the session has one."""
        with run_time_hints():
            return self._run_query_statement(query)

    def _run_query_statement(self, query: ast.Query) -> Result:
        key = self._plan_key()
        cached = self.plans.get(key) if self.plans else None
        if cached is not None:
            spool, execution = self.pipeline.execute(cached.node, checked=True, place=True)
            return Result(rows=spool.contents(), schema=cached.schema, rowcount=len(spool), spool=spool,
                          canvas=execution.ctx.canvas)
        plan = self._bound_plan(query, key)
        replayed = self._replayed(plan)
        if replayed is not None:
            return replayed
        # planned once for all repeats after writes of equal statistics (a GRAD after each training write)
        self.pipeline.memo = self.plan_memo
        shared = self.pipeline.shared_work()
        recording = StepRecording() if key is not None and self.plan_memo is not None else None
        self.pipeline.recording = recording
        try:
            run = self.pipeline.run(plan, shared, place=True)
        finally:
            self.pipeline.recording = None
        if self.plans and not run.rewritten:  # shared subplans' tuples are this run's only
            self.plans.put(key, CachedPlan(run.main.node, plan.schema))
        if recording is not None:  # the next run after a write runs the same plans without planning
            self.plan_memo.keep_program(plan, recording.query_program(shared))
        return Result(rows=run.rows, schema=plan.schema, rowcount=len(run.rows), spool=run.spool, canvas=run.canvas)

    def _replayed(self, plan: lp.Plan) -> Optional[Result]:
        """The query run as its last run after a write ran (pipeline/step_program.py): its plan is the one bound
        then, what it scans has the statistics it had and its shared subplans' tuples do too; None where
        there is no such program, where it stops (a shared subplan's statistics changed) or where the last
        statement's tuples could serve it (planning finds them)."""
        program = self.plan_memo.program(plan) if self.plan_memo is not None else None
        if program is None or self.pipeline.carries_work():
            return None
        ran = run_query_program(self.pipeline, program)
        if ran is None:
            self.pipeline.discard_shared()  # the tuples its first runs made: it is planned afresh
            return None
        spools, execution = ran
        self.pipeline.carry(program, spools)
        spool = spools[-1]
        return Result(rows=spool.contents(), schema=plan.schema, rowcount=len(spool), spool=spool,
                      canvas=execution.ctx.canvas)

    def _bound_plan(self, query: ast.Query, key: Optional[tuple]) -> lp.Plan:
        """The query bound, its GRADs and EINSUMs expanded: remembered by the connection across writes that
        leave the statistics of what it scans as they were (a GRAD after each training write binds and
        differentiates once; plan_memo.py)."""
        if key is None or self.plan_memo is None:
            return self.bind_query(query).plan
        statement = key[:-1]  # the plan cache's key but the catalog version: bound_plans checks what changed
        (plan,) = self.plan_memo.bound_plans(("SELECT", *statement), self.catalog,
                                             lambda: [self.pipeline.expand(self.bind_query(query).plan)])
        return plan

    def _plan_key(self) -> Optional[tuple]:
        if self.plans is None:
            return None
        return PlanCache.key(self.text, self.bind.params, self.settings.snapshot(), self.catalog.version)


@contextmanager
def run_time_hints() -> Iterator[None]:
    """Hints for errors the operators raise without one, where the binder could not have known: an aggregate
    that met tiles of two shapes in one group (a stored tensor's edge tiles; edge_tiles.py catches the cases it
    can be sure of before anything runs)."""
    try:
        yield
    except DataError as exc:
        if exc.hint is None and "tiles of one group have shapes" in exc.message:
            exc.hint = EDGE_TILES_HINT
        raise
