"""Ctrl-C during a statement run in the main thread: a cancellation it stops at, then KeyboardInterrupt.

Python raises KeyboardInterrupt at whatever line the main thread is on when SIGINT arrives: inside a
finalizer (where it is printed and dropped: the Ctrl-C is lost), between a lock's acquire and the code
that releases it, or inside a DuckDB call that takes it and leaves its transaction aborted. While a
statement runs, trdb's own handler takes SIGINT instead: it cancels the statement as Cursor.close from
another thread does, the statement stops at its next check (every batch of every operator, every tile
written, DuckDB's own checks), rolls back what it had not committed, and KeyboardInterrupt is raised
when it has ended. A second Ctrl-C raises KeyboardInterrupt at once, as Python would.
"""
from __future__ import annotations

import _signal  # signal's C module: signal.signal's wrapper (int to enum) costs 10 us a statement, this 0.5
import signal
import threading
from types import TracebackType
from typing import Any, Optional

from trdb.errors import Error


class DeferredCtrlC:
    """Installs the handler for one statement, where it can (the main thread, Python's own handler in
    place); `cancel` stops the statement."""

    def __init__(self, cancel) -> None:
        self._cancel = cancel
        self._previous: Any = None
        self.pressed = 0

    def __enter__(self) -> "DeferredCtrlC":
        if (threading.current_thread() is threading.main_thread()
                and _signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._previous = _signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.pressed += 1
        if self.pressed > 1:
            raise KeyboardInterrupt  # pressed again: the user will not wait for the statement to stop
        self._cancel()

    def __exit__(self, exc_type: Optional[type], exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        if self._previous is not None:
            _signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        if self.pressed and (exc is None or isinstance(exc, Error)):
            # the statement was cancelled (QueryCancelled), failed on its way out, or ended first
            raise KeyboardInterrupt from exc
