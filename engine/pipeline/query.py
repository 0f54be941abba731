"""One query's path, the same for SELECT, every statement that runs a query, EXPLAIN and EXPLAIN ANALYZE.

    bind (planner) -> expand EINSUM and GRAD -> shared subplans (each run once, first) -> optimize
    -> physical plan -> execute

Shared subplans are part of what runs: EXPLAIN plans them, runs them (their tuples decide the
plan of the rest, as they do for SELECT), and shows each once above the plan that reads them. It
shows them all, even those a SELECT right after the same work would take from the last statement.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from functools import partial
from typing import Optional, Union

from trdb.catalog.catalog import Catalog
from trdb.config.settings import Settings
from trdb.execution.executor import Execution
from trdb.execution.executors import start_execution
from trdb.execution.operators.operator import ExecContext
from trdb.execution.result_canvas import ResultCanvas, canvas_for
from trdb.execution.spool import RowSpool
from trdb.execution.state import ExecutionState
from trdb.execution.workers import one_blas_thread
from trdb.kernels.backend import Backend
from trdb.optimizer.driver import RuleContext, disabled_rules, optimize
from trdb.optimizer.physical_planner import plan_physical
from trdb.optimizer.whole_products import dense_limit
from trdb.parser import ast
from trdb.pipeline.expansions import expand
from trdb.pipeline.limits import check_plan
from trdb.pipeline.nesting import nesting_guard
from trdb.pipeline.plan_memo import PlanMemo
from trdb.pipeline.shared_work import CarriedWork, SharedWork
from trdb.pipeline.step_program import StepProgram, StepRecording
from trdb.plan import logical as lp
from trdb.plan.physical import PhysicalNode
from trdb.planner.binder import Binder, BoundQuery
from trdb.planner.expression_binder import BindContext
from trdb.storage.progress import PROGRESS, StatementProgress

SPOOL_SHARE = 4  # a result or shared subplan holds at most 1/SPOOL_SHARE of the memory budget in memory


@dataclass
class Stage:
    """A physical plan that ran (or would run), with its execution when it ran."""

    node: PhysicalNode
    execution: Optional[Execution] = None


@dataclass
class QueryRun:
    """What running one query did: its shared subplans, in the order they ran, then its own plan."""

    shared: list[Stage] = field(default_factory=list)
    main: Optional[Stage] = None
    rows: Union[list, RowSpool] = field(default_factory=list)  # a list, or the spool when the result spilled
    spool: Optional[RowSpool] = None  # holds the result's memory (and spill file) until closed or dropped
    rewritten: bool = False  # shared tuples (run now, or carried from the last statement) are in the plan
    canvas: Optional[ResultCanvas] = None  # the array the result's tiles were placed in, if they were


@dataclass
class Pipeline:
    """The stages of a query for one statement: its catalog snapshot, settings, backend and cancel flag."""

    catalog: Catalog
    settings: Settings
    backend: Backend
    bind_context: BindContext
    interrupted: threading.Event
    carried: Optional[CarriedWork] = None
    memo: Optional[PlanMemo] = None  # physical plans remembered (MINIMIZE's steps; the connection's memo)
    recording: Optional[StepRecording] = None  # a MINIMIZE step's or query's runs, recorded (pipeline/step_program.py)
    analyze: bool = False  # EXPLAIN ANALYZE: operators count the work their kernels do (execution/work.py)
    _run: Optional[QueryRun] = None  # the run that shared subplans met now are recorded in
    _shared_spools: list = field(default_factory=list)  # this statement's shared subplans' tuples

    # ------------------------------------------------------------ stages

    def bind(self, query: ast.Query) -> BoundQuery:
        with nesting_guard():
            return Binder(self.catalog, self.bind_context).bind_query(query)

    def bind_table(self, ref: ast.TableRef) -> lp.Plan:
        """One relation bound alone (DESCRIBE, SHOW TABLES): a view of views binds each of them, as deep as a
        query may nest."""
        with nesting_guard():
            return Binder(self.catalog, self.bind_context).bind_table(ref)

    def expand(self, plan: lp.Plan, dense: bool = True) -> lp.Plan:
        """EINSUM decomposed (for this statement's workers) and GRAD built into relational plans. `dense`:
        an EINSUM of small dense stored tensors may run on whole arrays (not where another plan of the
        caller shares its forward pass: MINIMIZE's loss and gradients)."""
        limit = dense_limit(self.settings, self.catalog) if dense else 0
        with nesting_guard():
            how = (self.settings.workers, limit, "product_chains" not in disabled_rules(self.settings))
            expanded = partial(expand, plan, *how)
            return expanded() if self.memo is None else self.memo.expanded(plan, how, expanded)

    def shared_work(self, carried: bool = True) -> SharedWork:
        """Repeated subplans run once; the carried work (unless `carried` is false) holds the previous
        statement's, which then run no more."""
        return SharedWork(self._shared_rows, self.carried if carried else None, self._carried_state())

    def _carried_state(self) -> tuple:
        """What carried tuples were computed under, and are valid while it holds (CarriedWork)."""
        return self.catalog.version, self.backend.name

    def carries_work(self) -> bool:
        """The last statement left shared tuples this one may read (its planning would find them)."""
        carried = self.carried
        return carried is not None and bool(carried.tuples) and carried.state == self._carried_state()

    def carry(self, program: StepProgram, spools: list) -> None:
        """A query program ran (step_program.run_query_program): its shared subplans' tuples are carried to
        the next statement, as SharedWork.finish carries a planned statement's."""
        if self.carried is None:
            return
        numbering = self.carried.numbering_for(self._carried_state())
        self.carried.keep({run.number: lp.RowsScan(spools[run.position], run.schema, run.keys)
                           for run in program.carried} if numbering is program.numbering else {})

    def share(self, plan: lp.Plan, shared: SharedWork) -> lp.Plan:
        """The plan with its repeated subplans run (now, once) and replaced by their tuples."""
        with nesting_guard():
            return shared.rewrite(plan)

    def physical(self, plan: lp.Plan, keep_zero_tuples: bool = False,
                 rules: Optional[RuleContext] = None) -> PhysicalNode:
        """Optimize, then plan physically. `keep_zero_tuples`: the caller tells a tuple holding zero
        tiles from an absent one (UPDATE, MINIMIZE's gradients, a shared subplan), so the optimizer
        may not drop such tuples. `rules` receives the optimizer rules' timings."""
        remembered, slot = (self.memo.lookup(plan, keep_zero_tuples, self.settings.snapshot())
                            if self.memo is not None and not rules else (None, None))
        if remembered is not None:
            return remembered
        rules = rules or RuleContext(self.catalog, self.settings, keep_zero_tuples=keep_zero_tuples)
        rules.interrupted = self.interrupted
        with nesting_guard():
            optimized = optimize(plan, self.settings, self.catalog, context=rules)
            node = plan_physical(optimized, self.settings.workers, self.catalog, self.settings.min_parallel_cost,
                                 threads=self.settings.executor == "local", disabled=disabled_rules(self.settings))
        if self.memo is not None:
            self.memo.put(slot, node)
        return node

    def execute(self, node: PhysicalNode, checked: bool = False, keep: bool = False,
                place: bool = False) -> tuple[RowSpool, Execution]:
        """Run a physical plan to the end; its tuples go to a spool (spilled past the memory budget), the
        execution is returned for its metrics. `checked`: the plan passed `check_plan` under these
        settings already (a cached plan: its key holds them). `keep`: other plans will read the spool
        (a shared subplan's), so the executor may keep its own copies for them while the spool lives.
        `place`: the result goes to a cursor, which may assemble it: dense products are written into
        one array where they can be (execution/result_canvas.py; `execution.ctx.canvas`)."""
        if not checked:
            check_plan(self.settings, node)
        database = self.catalog.db.file
        memory = database.memory_for(self.backend)
        progress = PROGRESS.get()
        ctx = ExecContext(self.backend, self.catalog, ExecutionState(self.interrupted, progress), memory, database.spill,
                          host_memory=database.memory, count_work=self.analyze)
        if place and self.backend.on_host:  # under Ray, actors on this machine place tiles too (ray/cross_process_canvas.py)
            ctx.canvas = canvas_for(node, memory.budget // SPOOL_SHARE)  # no larger than the spool holds
        execution = start_execution(node, ctx, self.settings, keep)
        # a spool keeps at most a share of the budget, so that the operators running beside it keep room
        spool = RowSpool(memory.reservation("tuples"), lambda: database.spill.new_file("tuples"),
                         memory.budget // SPOOL_SHARE)
        small = _small_kernel_plan(node, self.settings.workers, self.settings.min_parallel_cost)
        blas = one_blas_thread() if small else contextlib.nullcontext()
        try:
            with blas, execution, nesting_guard():
                spool.extend(_counted(execution.batches(), progress))
        except BaseException:
            spool.close()  # a failed or cancelled statement leaves no spill file behind
            raise
        if keep:
            execution.keep_result(spool)
        if self.recording is not None:
            self.recording.add(node, keep, spool)
        return spool, execution

    # ------------------------------------------------------------ the whole path

    def run(self, plan: lp.Plan, shared: Optional[SharedWork] = None, keep_zero_tuples: bool = False,
            execute: bool = True, rules: Optional[RuleContext] = None, place: bool = False) -> QueryRun:
        """Shared subplans, then the plan itself: planned, and run unless `execute` is false (`place`: as
        in `execute`)."""
        shared = shared or self.shared_work()
        try:
            return self._run_with(plan, shared, keep_zero_tuples, execute, rules, place)
        except BaseException:
            self.discard_shared()
            raise

    def _run_with(self, plan: lp.Plan, shared: SharedWork, keep_zero_tuples: bool, execute: bool,
                  rules: Optional[RuleContext], place: bool = False) -> QueryRun:
        plan = self.expand(plan)
        run, outer = QueryRun(), self._run
        self._run = run
        try:
            rewritten = self.share(plan, shared)
        finally:
            self._run = outer
        run.rewritten = rewritten is not plan
        node = self.physical(rewritten, keep_zero_tuples, rules)
        run.main = Stage(node)
        if execute:
            run.spool, run.main.execution = self.execute(node, place=place)
            run.rows = run.spool.contents()
            run.canvas = run.main.execution.ctx.canvas
            shared.finish()
        return run

    def discard_shared(self) -> None:
        """The statement failed: its shared subplans' tuples are forgotten now (memory, spill files), not carried."""
        if self.carried is not None:
            self.carried.discard(self._shared_spools)
        for spool in self._shared_spools:
            spool.close()
        self._shared_spools = []

    def end_step(self) -> None:
        """A step of an iterative statement (MINIMIZE) succeeded: its shared subplans' tuples are read no
        more (the next step runs at new parameter values), so they go now, not when the statement ends."""
        self.discard_shared()

    def hold_shared(self, spool: RowSpool) -> None:
        """A shared subplan's tuples, freed when the step or statement ends (`end_step`, `discard_shared`)."""
        self._shared_spools.append(spool)

    def _shared_rows(self, plan: lp.Plan) -> RowSpool:
        # a shared subplan's tuples are read by plans its optimization does not see: keep them all
        stage = Stage(self.physical(plan, keep_zero_tuples=True))
        spool, stage.execution = self.execute(stage.node, keep=True)
        self.hold_shared(spool)
        if self._run is not None:
            self._run.shared.append(stage)
        return spool


SMALL_PLAN_FLOPS = 1e7  # below this, limiting BLAS's threads costs more (~40 us) than it can save
# kernels doing fewer FLOPs per byte they read are memory-bound (a matrix-vector product: 0.5, the MLP's
# H @ W2 took 373 ms on a busy machine with two BLAS threads, 12 ms with one); a matrix product of
# 1024 x 64 by 64 x 64 tiles does 30 and gains from BLAS's threads (the EINSUM chain's kernels: 0.58 -> 0.42 ms)
MEMORY_BOUND_FLOPS_PER_BYTE = 4.0


def _small_kernel_plan(node: PhysicalNode, workers: int, min_parallel_cost: float) -> bool:
    """A plan kept on one partition though more workers are allowed (its cost is below
    min_parallel_cost) whose kernels are worth a BLAS call but memory-bound (matrix-vector products):
    it runs them on one BLAS thread. Compute-bound kernels (matrix products) keep BLAS's threads, as at
    workers = 1, and so does a plan on one partition for having fewer tuples than workers, with
    kernels past min_parallel_cost: BLAS's threads are its parallelism."""
    if workers <= 1:
        return False  # workers = 1 asks for one partition: BLAS keeps its threads
    nodes, flops, read = [node], 0.0, 0.0
    while nodes:
        current = nodes.pop()
        if current.exchange is not None:
            return False  # workers started by the exchange limit BLAS themselves
        flops += current.estimate.flops
        if current.estimate.flops:
            read += sum(child.estimate.bytes for child in current.children)
        nodes.extend(current.children)
    return SMALL_PLAN_FLOPS <= flops < min(min_parallel_cost, MEMORY_BOUND_FLOPS_PER_BYTE * read)


def _counted(batches, progress: Optional[StatementProgress]):
    """The result's batches, each counted in the statement's progress as it passes."""
    for batch in batches:
        if progress is not None:
            progress.tuples += len(batch)
        yield batch
