"""A MINIMIZE step's physical plans, recorded as they run and run again at the next steps without planning.

Each step of a MINIMIZE runs the same logical plans (the loss and every gradient, bound once) over the
tuples of the same shared subplans (the forward pass at the new parameter values). Planning them again
(the shared work's rewrite, the memo's look-up by each plan's signature, the memory check) gives the
plans of the step before as long as what planning reads of the shared tuples (their count, each key
column's distinct values and NULLs: plan_memo.py) is the same; the tuples themselves only flow through.
So a step records the physical plans it ran, in order, each RowsScan reading the tuples of an earlier
one by its position, and the next step runs that program: each shared subplan's tuples are checked to
have the statistics they had when recorded, and a step whose tuples differ stops and is planned afresh.

A query is recorded the same way (its shared subplans' runs, then its own): run again after a write that
left the statistics of what it scans as they were (its bound plan is then the same object), it runs its
program instead of looking each plan up (statements/context.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Optional

from trdb.pipeline.plan_memo import rows_statistics, with_rows
from trdb.plan import logical as lp
from trdb.plan.physical import PhysicalNode

if TYPE_CHECKING:
    from trdb.execution.executor import Execution
    from trdb.execution.spool import RowSpool
    from trdb.pipeline.query import Pipeline
    from trdb.pipeline.shared_work import SharedWork


@dataclass(frozen=True)
class _Run:
    """One physical plan of the step: its RowsScans read the tuples of earlier runs, by position."""

    node: PhysicalNode
    shared: bool  # a shared subplan's: later runs read its tuples
    statistics: Optional[tuple]  # of a shared run's tuples, as planning read them (None: not shared)


@dataclass(frozen=True)
class CarriedRun:
    """A shared subplan's run whose tuples the next statement may take (CarriedWork): its number in the
    numbering it was recorded under, and the scan that reads them, less its tuples."""

    number: int
    position: int
    schema: Any
    keys: Any


@dataclass(frozen=True)
class StepProgram:
    """The runs of a step, in order, and which of them gave the step's results (the loss, each gradient);
    a query's: its shared subplans' runs, then its own, with the shared runs it carries to the next statement."""

    runs: tuple[_Run, ...]
    results: tuple[int, ...]
    carried: tuple[CarriedRun, ...] = ()
    numbering: object = None  # the numbering `carried` numbers are of


@dataclass
class StepRecording:
    """A step's runs as the pipeline executes them (Pipeline.execute reports each)."""

    runs: list[_Run] = field(default_factory=list)
    results: list[int] = field(default_factory=list)
    closed: bool = True  # every RowsScan read tuples of this step's runs (none carried from elsewhere)
    _positions: dict[int, int] = field(default_factory=dict)

    def add(self, node: PhysicalNode, shared: bool, spool) -> None:
        try:
            node = with_rows(node, lambda rows: self._positions[id(rows)])
        except KeyError:  # tuples from outside the step (the last statement's): not a program to repeat
            self.closed = False
            return
        statistics = _statistics(spool, node) if shared else None
        self._positions[id(spool)] = len(self.runs)
        self.runs.append(_Run(node, shared, statistics))

    def mark_result(self) -> None:
        """The last run made one of the step's results."""
        self.results.append(len(self.runs) - 1)

    def program(self) -> Optional[StepProgram]:
        """The step as a program to run again; None where it read tuples from outside it."""
        return StepProgram(tuple(self.runs), tuple(self.results)) if self.closed and self.runs else None

    def query_program(self, shared: "SharedWork") -> Optional[StepProgram]:
        """A query's runs as a program, its last run the result, with the shared subplans' numbers (which the
        next statement may find its tuples by)."""
        self.mark_result()
        program = self.program()
        if program is None:
            return None
        carried = tuple(CarriedRun(number, self._positions[id(scan.rows)], scan.schema, scan.keys)
                        for number, scan in shared.memo.items() if id(scan.rows) in self._positions)
        return replace(program, carried=carried, numbering=shared.numbering)


def run_program(pipeline: "Pipeline", program: StepProgram) -> Optional[list]:
    """The step's results (the tuples of each, in order) from running `program` again; None where a shared
    subplan's tuples no longer have the statistics its plans were made for (the tuples made so far are
    closed, and the step is to be planned afresh)."""
    ran = _rerun(pipeline, program, place=False)
    return None if ran is None else [ran[0][position].contents() for position in program.results]


def run_query_program(pipeline: "Pipeline", program: StepProgram) -> Optional[tuple[list, "Execution"]]:
    """A query's program run again: the spools of its runs, in order, and the execution of its last (the
    result's, which a cursor may assemble: Pipeline.execute's `place`); None as for `run_program`."""
    return _rerun(pipeline, program, place=True)


def _rerun(pipeline: "Pipeline", program: StepProgram,
           place: bool) -> Optional[tuple[list["RowSpool"], "Execution"]]:
    """Every run's spool, in order, and the last run's execution (`place`: its result may be assembled); None
    where a shared run's tuples have other statistics than recorded."""
    spools: list = []
    execution = None
    try:
        for index, run in enumerate(program.runs):
            node = with_rows(run.node, spools.__getitem__)
            last = place and index == len(program.runs) - 1
            # checked when it was recorded
            spool, execution = pipeline.execute(node, checked=True, keep=run.shared, place=last)
            spools.append(spool)
            if run.shared:
                pipeline.hold_shared(spool)
                if _statistics(spool, node) != run.statistics:
                    _close(spools)
                    return None
    except BaseException:  # a failed or cancelled step leaves no tuples (nor spill files) behind
        _close(spools)
        pipeline.discard_shared()
        raise
    return spools, execution


def _close(spools: list) -> None:
    for spool in spools:
        spool.close()


def _statistics(spool, node: PhysicalNode) -> tuple:
    """What planning reads of a shared subplan's tuples (plan_memo.rows_statistics)."""
    return rows_statistics(lp.RowsScan(spool, node.schema))
