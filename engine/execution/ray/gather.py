"""On the driver: the final gather reads its fragments' streams itself, on the thread that consumes it.

The fragments under the final gather send their batches to the driver, which is also where the
gather runs. No driver thread stands between: the consumer waits on all their streams at once
(`ray.wait`), takes the next item of whichever is ready, and returns its batches. A fragment's
window of unread items (its generator's backpressure) bounds what it sends ahead. The fragments
are submitted when the execution starts, by the thread that starts it.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, Optional

import ray

from trdb.errors import QueryCancelled
from trdb.execution.exchange.channel import POLL_SECONDS
from trdb.execution.operators.operator import Batch
from trdb.execution.ray.routing import Moved, settle
from trdb.execution.state import ExecutionState


class _Stream:
    """One fragment's stream: how to submit it, then the stream and what its items go through."""

    def __init__(self, submit: Callable[[], tuple[Any, Callable[[], None]]], worker: int,
                 take: Callable[[tuple, Any, Callable[[], Any]], bool]):
        self.submit, self.worker, self.take = submit, worker, take
        self.stream: Any = None
        self.confirm: Callable[[], None] = lambda: None


class StreamGather:
    """Stands in for the final gather's channel: `get` pulls the fragments' streams on the caller's thread."""

    def __init__(self, state: ExecutionState, moved: Moved, failure: Callable[[BaseException, Optional[int]],
                                                                             BaseException]):
        self.state, self.moved, self.failure = state, moved, failure
        self._streams: list[_Stream] = []
        self._ready: deque[Batch] = deque()

    def add(self, submit, worker: int, take) -> None:
        """A fragment under the gather: `submit()` ships it (a stream, and what to call once it answered),
        `take(header, destination, next_rows)` passes an item's batches on, true at its last item."""
        self._streams.append(_Stream(submit, worker, take))

    def start(self) -> None:
        for entry in self._streams:
            try:
                entry.stream, entry.confirm = entry.submit()
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
        self._ready.append(batch)

    def _pull(self) -> None:
        ready, _ = ray.wait([entry.stream for entry in self._streams], num_returns=1, timeout=POLL_SECONDS)
        self.state.raise_if_cancelled()
        for entry in [e for e in self._streams if e.stream in ready]:
            try:
                header = settle(next(entry.stream), self.state)
                entry.confirm()
                if entry.take(header, self, lambda e=entry: self._next_ref(e.stream)):
                    self._streams.remove(entry)
            except StopIteration:  # released before it ran
                self._fail(QueryCancelled("the statement was cancelled"), entry)
            except BaseException as exc:
                self._fail(exc, entry)

    def _next_ref(self, stream) -> Any:
        while not ray.wait([stream], timeout=POLL_SECONDS)[0]:
            self.state.raise_if_cancelled()
        return next(stream)

    def _fail(self, exc: BaseException, entry: _Stream) -> None:
        self.state.fail(self.failure(exc, entry.worker))
        self.cancel()
        self.state.raise_if_cancelled()  # the statement's first error

    def cancel(self) -> None:
        """Fragments still running stop (a queued one never starts; a running one stops on release)."""
        streams, self._streams = self._streams, []
        for entry in streams:
            if entry.stream is not None:
                try:
                    ray.cancel(entry.stream)
                except Exception:  # already finished, or its actor is gone
                    pass
