"""Shared subplans run once: the tuples of a statement's repeated subplans (SharedWork runs them, first) and the
last statement's, carried to the next (CarriedWork); the optimizer only numbers and rewrites (common_subplans.py)."""
from __future__ import annotations

from collections import Counter
from typing import Callable, Optional

from trdb.kernels.sparse import nbytes as tile_bytes
from trdb.optimizer.common_subplans import Numbering
from trdb.optimizer.group_sizes import key_slots
from trdb.optimizer.subsumed_projections import merge_rekeys, read_subsuming
from trdb.plan import logical as lp


class CarriedWork:
    """The shared subplans' tuples of the last statement, kept for the next while nothing changed.

    Separate statements often repeat a computation: `GRAD(loss, W1)` then `GRAD(loss, W2)` both
    run the forward pass. The numbering outlives writes (equal subplans are equal whatever the data:
    a training loop's plans, bound once, are numbered once), so a later statement finds an earlier
    one's subplans by number; the tuples live as long as the state they were computed in (the
    catalog version and the backend).
    Only tuples within `budget` bytes are kept, and only the last statement's. The spools that hold
    them keep the memory they reserved from the database's budget; one that was refused (it spilled)
    is not carried, and what is not carried gives its memory back as it is dropped.
    """

    MAX_SUBPLANS = 20_000  # numbered subplans before the numbering starts over (it holds them alive)

    def __init__(self, budget: Callable[[], int]):
        self.budget = budget
        self.state: object = None
        self.numbering = Numbering()
        self.tuples: dict[int, lp.RowsScan] = {}

    def numbering_for(self, state: object) -> "Numbering":
        """The numbering for a statement under `state`; a new state (a write, another backend) forgets the
        carried tuples, and past MAX_SUBPLANS the numbering starts over."""
        if state != self.state:
            self.state, self.tuples = state, {}
        if self.numbering.size() > self.MAX_SUBPLANS:
            self.numbering, self.tuples = Numbering(), {}
        self.numbering.next_statement()
        return self.numbering

    def keep(self, memo: dict[int, lp.RowsScan]) -> None:
        """Keep a finished statement's shared tuples, if they are all in memory and fit the budget (else none)."""
        sizes = [_held_bytes(m.rows) for m in memo.values()]
        self.tuples = dict(memo) if None not in sizes and sum(sizes) <= self.budget() else {}

    def shrink(self, wanted: int) -> int:
        """Another reservation needs memory: forget every carried tuple (a statement still reading them keeps
        them until it ends, then their spools give their memory back). Returns the bytes they held."""
        held = sum(_held_bytes(m.rows) or 0 for m in self.tuples.values())
        self.tuples = {}
        return held

    def discard(self, rows: list) -> None:
        """Forget the carried tuples held in `rows` (spools of a statement that failed)."""
        gone = {id(r) for r in rows}
        self.tuples = {n: m for n, m in self.tuples.items() if id(m.rows) not in gone}


def _held_bytes(rows) -> Optional[int]:
    """The bytes a shared subplan's tuples hold in memory; None when they spilled (the budget refused them)."""
    if isinstance(rows, list):
        return sum(tile_bytes(value) for row in rows for value in row)
    return None if rows.spilled else rows.nbytes


class SharedWork:
    """Tuples of repeated subplans, computed once by `run` and reused (within a statement or a step,
    and from the previous statement through `carried`)."""

    def __init__(self, run: Callable[[lp.Plan], object], carried: Optional[CarriedWork] = None,
                 state: object = None):
        self.run = run
        self.carried = carried
        self.numbering = carried.numbering_for(state) if carried is not None else Numbering()
        self.memo: dict[int, lp.RowsScan] = {}
        self.counts: Counter = Counter()
        self._slots: dict = {}  # the key slots of the subplans shared (group_sizes.key_slots' memo)

    def finish(self) -> None:
        """The statement succeeded: what it shared may serve the next one."""
        if self.carried is not None:
            self.carried.keep(self.memo)

    def expect(self, plans: list[lp.Plan]) -> None:
        """Count the subplans of plans to be run later with this object: what they share runs once."""
        for plan in plans:
            self._count(plan, self.counts)

    def rewrite(self, plan: lp.Plan) -> lp.Plan:
        """`plan` with its repeated subplans (counted now, or by `expect` already) replaced by their tuples."""
        counts = self.counts
        if not counts:
            # one statement's plan: a projection that another computes more of reads that one
            plan = read_subsuming(merge_rekeys(plan), self.numbering.number)
            counts = Counter()
            self._count(plan, counts)
        return self._rewrite(plan, counts)

    def _count(self, plan, counts: Counter) -> None:
        number = self.numbering.number(plan)
        if number is not None:
            counts[number] += 1
            if counts[number] > 1:
                return  # its interior was counted with its first occurrence
        for child in plan.inputs:
            self._count(child, counts)

    def _rewrite(self, plan, counts: Counter):
        number = self.numbering.number(plan)
        if number is not None and number in self.memo:
            return self.memo[number]
        if number is not None and self.carried is not None and number in self.carried.tuples:
            self.memo[number] = self.carried.tuples[number]  # computed by the previous statement
            return self.memo[number]
        rebuilt = lp.with_inputs(plan, [self._rewrite(child, counts) for child in plan.inputs])
        if number is not None and counts[number] > 1 and not isinstance(plan, (lp.TensorScan, lp.TableScan,
                                                                                        lp.RowsScan)):
            self.memo[number] = lp.RowsScan(self.run(rebuilt), plan.schema, key_slots(rebuilt, self._slots))
            return self.memo[number]
        return rebuilt
