"""On the driver: the final gather reads its fragments' streams itself, on the thread that consumes it.

The fragments under the final gather send their batches to the driver, which is also where the
gather runs. No driver thread stands between: the consumer waits on all of them at once
(`ray.wait`: a fragment's reply, which holds a small output whole, or the stream of a large one),
takes the next item of whichever is ready, and returns its batches. A stream's window of unread
items (its generator's backpressure) bounds what its fragment sends ahead. The fragments
are submitted when the execution starts, by the thread that starts it.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, Optional

import ray

from trdb.errors import QueryCancelled
from trdb.execution.exchange.channel import POLL_SECONDS
from trdb.execution.operators.operator import Batch
from trdb.execution.ray.destinations import Moved, settle
from trdb.execution.state import ExecutionState


class _Fragment:
    """One fragment under the gather: how to submit it, then what is awaited of it (its reply, then, for a
    large output, its stream) and what its items go through."""

    def __init__(self, submit: Callable[[], tuple[Any, Callable[[], None]]], resume: Callable[[tuple], Any],
                 worker: int, take: Callable[[tuple, Any, Optional[Callable[[], Any]]], bool], streamed: bool):
        self.submit, self.resume, self.worker, self.take = submit, resume, worker, take
        self.awaited: Any = None     # the reply's reference, then the stream (or the stream from the start)
        self.streaming = streamed
        self.confirm: Callable[[], None] = lambda: None
        self.cancellable = True

    def answered(self) -> None:
        """Its actor has answered (it holds the fragment now): confirmed once."""
        self.confirm()
        self.confirm = lambda: None


class StreamGather:
    """Stands in for the final gather's channel: `get` pulls the fragments' streams on the caller's thread."""

    def __init__(self, state: ExecutionState, moved: Moved, failure: Callable[[BaseException, Optional[int]],
                                                                             BaseException],
                 place: Optional[Callable[[Batch], Batch]] = None):
        self.state, self.moved, self.failure = state, moved, failure
        self.place = place  # puts a batch's tiles in their places in the result's array (shared_canvas.py)
        self._streams: list[_Fragment] = []
        self._ready: deque[Batch] = deque()

    def add(self, submit, resume, worker: int, take, streamed: bool = False) -> None:
        """A fragment under the gather: `submit()` ships it (its reply's reference, or its stream when
        `streamed`, and what to call once it answered), `resume(reply)` streams a large output,
        `take(header, destination, next_rows)` passes an item's batches on, true at its last item."""
        self._streams.append(_Fragment(submit, resume, worker, take, streamed))

    def start(self) -> None:
        for entry in self._streams:
            try:
                entry.awaited, entry.confirm, entry.cancellable = entry.submit()
            except BaseException as exc:
                self._fail(exc, entry)

    def get(self, partition: int) -> Optional[Batch]:
        while not self._ready:
            if not self._streams:
                self.state.raise_if_failed()
                return None
            self._pull()
        return self._ready.popleft()

    def deliver(self, partitions: list[int], rows: Any, tuples: int, size: int) -> None:
        """A piece of a fragment's output (the gather has one partition)."""
        batch = settle(rows, self.state) if isinstance(rows, ray.ObjectRef) else rows
        self.moved.add(tuples, size)
        self._ready.append(self.place(batch) if self.place is not None else batch)

    def _pull(self) -> None:
        ready, _ = ray.wait([entry.awaited for entry in self._streams], num_returns=1, timeout=POLL_SECONDS)
        self.state.raise_if_cancelled()
        for entry in [e for e in self._streams if e.awaited in ready]:
            try:
                self._next_item(entry)
            except StopIteration:  # released before it ran
                self._fail(QueryCancelled("the statement was cancelled"), entry)
            except BaseException as exc:
                self._fail(exc, entry)

    def _next_item(self, entry: _Fragment) -> None:
        if not entry.streaming:
            reply = settle(entry.awaited, self.state)
            entry.answered()
            if reply[0] == "more":  # a large output: streamed from now on
                entry.awaited, entry.streaming, entry.cancellable = entry.resume(reply), True, True
                return
            if not entry.take(reply, self, None):
                raise StopIteration
            self._streams.remove(entry)
            return
        header = settle(next(entry.awaited), self.state)
        entry.answered()
        if entry.take(header, self, lambda: self._next_ref(entry.awaited)):
            self._streams.remove(entry)

    def _next_ref(self, stream) -> Any:
        while not ray.wait([stream], timeout=POLL_SECONDS)[0]:
            self.state.raise_if_cancelled()
        return next(stream)

    def _fail(self, exc: BaseException, entry: _Fragment) -> None:
        self.state.fail(self.failure(exc, entry.worker))
        self.cancel()
        self.state.raise_if_cancelled()  # the statement's first error

    def close(self) -> None:
        """The execution has ended: stop what still runs, and let go of it (its plan holds tuples that
        should go as soon as it does, not when a cycle through here is collected)."""
        self.cancel()
        self.failure = None

    def cancel(self) -> None:
        """Fragments still running stop (a queued one never starts; a running one stops on release)."""
        streams, self._streams = self._streams, []
        for entry in streams:
            if entry.awaited is not None and entry.cancellable:  # else released in the actor (execution.py)
                try:
                    ray.cancel(entry.awaited)
                except Exception:  # already finished, or its actor is gone
                    pass
