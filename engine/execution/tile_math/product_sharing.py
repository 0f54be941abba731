"""Tile products that the instances of one partitioned SUM(MATMUL) aggregate compute for one another.

An aggregate partitioned on its groups runs one instance a worker, each over its own input. On a shared
machine one core often runs slower than the other for a while, and the instance on it ends well after
the other (16 products of 1024 x 512 by 512 x 1024 tiles each on two threads: ends 13 ms apart at the
median, up to 48 ms; the whole 125 ms at the median against 114 when the threads take products in turn).
So each instance queues the products of its rows, at most QUEUED (beyond that it computes the oldest
itself before it reads on), and an instance whose input has ended computes its siblings' queued
products until every sibling's input has ended too.

A product may be computed on any instance's thread, but it is added into its group's sum only by the
instance that owns the group, on that instance's thread, in the order of the group's rows: the sums are
those of the unshared aggregate bit for bit, and no accumulator is touched by two threads. A product that
failed raises in its owner when its turn to be added comes. Small products (under MIN_SHARED_FLOPS) and
any other way of adding into a sum run at once, after the group's queued products.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable, Optional

from trdb.execution.state import ExecutionState

QUEUED = 4                    # products an instance keeps queued for its siblings before computing one
MIN_SHARED_FLOPS = 1 << 22    # a smaller product is computed at once: queueing it would cost about as much
POLL_SECONDS = 0.05           # how often a wait looks at the cancellation flag


class GroupOrder:
    """A group's products in the order of its rows: `assigned` numbered so far, `added` to its sum so far,
    `ready` the computed ones waiting for those before them."""

    __slots__ = ("assigned", "added", "ready")

    def __init__(self) -> None:
        self.assigned = 0
        self.added = 0
        self.ready: dict[int, "_Task"] = {}

    @property
    def pending(self) -> int:
        return self.assigned - self.added


class _Task:
    __slots__ = ("owner", "order", "number", "compute", "apply", "result", "error")

    def __init__(self, owner: "SharedProducts", order: GroupOrder, number: int,
                 compute: Callable[[], Any], apply: Callable[[Any], None]):
        self.owner, self.order, self.number, self.compute, self.apply = owner, order, number, compute, apply
        self.result: Any = None
        self.error: Optional[BaseException] = None


class ProductShare:
    """What the instances of one aggregate (at one place in one execution's plan) share: their queues."""

    def __init__(self, state: ExecutionState):
        self.state = state
        self.changed = threading.Condition()
        self.members: list[SharedProducts] = []

    def member(self) -> "SharedProducts":
        """A new instance's part, known to its siblings from now on (before any of them runs)."""
        member = SharedProducts(self)
        with self.changed:
            self.members.append(member)
        return member


class SharedProducts:
    """One instance's products: queued, computed by it or a sibling, added by it in each group's order."""

    def __init__(self, share: ProductShare):
        self._share = share
        self._queue: deque[_Task] = deque()     # this instance's products not yet begun, oldest first
        self._computed: list[_Task] = []        # computed by anyone, not yet added
        self.pending = 0                        # products queued, running or computed, not yet added
        self.reading = True                     # its input has not ended

    def submit(self, order: GroupOrder, compute: Callable[[], Any], apply: Callable[[Any], None]) -> None:
        """Queue `compute()` (a product of the group `order` is of), whose result `apply` adds to the group's
        sum in turn; with more than QUEUED waiting, compute the oldest now."""
        task = _Task(self, order, order.assigned, compute, apply)
        order.assigned += 1
        self.pending += 1
        with self._share.changed:
            self._queue.append(task)
            self._share.changed.notify_all()
        while len(self._queue) > QUEUED and (oldest := self._take_own()) is not None:
            self._run(oldest)
        self._add_computed()

    def settle(self, order: Optional[GroupOrder]) -> None:
        """Every product of the group `order` is added (the group can be read, or added into directly)."""
        while order is not None and order.pending:
            self._work_or_wait()

    def settle_all(self) -> None:
        """Every product of this instance is added (its groups can be read or spilled)."""
        while self.pending:
            self._work_or_wait()

    def input_ended(self) -> None:
        """This instance has read all its input: its products are added, then it computes its siblings'
        queued products until their inputs have ended too."""
        self.settle_all()
        share = self._share
        with share.changed:
            self.reading = False
            share.changed.notify_all()
        while True:
            task = self._take_sibling()
            if task is not None:
                self._run(task)
                continue
            with share.changed:
                if not any(m.reading or m._queue for m in share.members if m is not self):
                    return
                share.changed.wait(POLL_SECONDS)
            share.state.raise_if_cancelled()

    def close(self) -> None:
        """The instance has closed (its end, an error, a cancellation): its products not begun are dropped,
        and no sibling waits for its input."""
        with self._share.changed:
            self.reading = False
            self._queue.clear()
            self._share.changed.notify_all()

    # ------------------------------------------------------------ internals

    def _work_or_wait(self) -> None:
        """Add what is computed; else compute this instance's oldest queued product; else wait for one a
        sibling computes."""
        if self._add_computed():
            return
        task = self._take_own()
        if task is not None:
            self._run(task)
            return
        share = self._share
        with share.changed:
            if not self._computed:
                share.changed.wait(POLL_SECONDS)
        share.state.raise_if_cancelled()

    def _take_own(self) -> Optional[_Task]:
        return self._take_from((self,))

    def _take_sibling(self) -> Optional[_Task]:
        return self._take_from(m for m in self._share.members if m is not self)

    def _take_from(self, members) -> Optional[_Task]:
        """The oldest queued product of the first of `members` with one queued, or None."""
        with self._share.changed:
            queue = next((m._queue for m in members if m._queue), None)
            return queue.popleft() if queue else None

    def _run(self, task: _Task) -> None:
        """Compute a product (of this instance or a sibling) and hand it to its owner."""
        try:
            task.result = task.compute()
        except Exception as exc:  # raised by its owner when its turn comes
            task.error = exc
        share = self._share
        with share.changed:
            task.owner._computed.append(task)
            share.changed.notify_all()

    def _add_computed(self) -> bool:
        """Add the computed products whose turn has come (on the owner's thread); whether any were computed."""
        with self._share.changed:
            computed, self._computed = self._computed, []
        for task in computed:
            order = task.order
            order.ready[task.number] = task
            while (turn := order.ready.pop(order.added, None)) is not None:
                order.added += 1
                self.pending -= 1
                if turn.error is not None:
                    raise turn.error
                turn.apply(turn.result)
        return bool(computed)
