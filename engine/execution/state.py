"""The state one execution's operators share across workers: cancellation and the first error."""
from __future__ import annotations

import threading
from typing import Optional

from trdb.errors import QueryCancelled
from trdb.storage.progress import StatementProgress


class ExecutionState:
    """What all instances of one execution share: the cancellation flag and the first error.

    `interrupted` is the statement's flag (Cursor.close, Ctrl-C): it stops every execution of the
    statement, while `cancelled` ends just this one (its first error, or its end).
    """

    def __init__(self, interrupted: Optional[threading.Event] = None,
                 progress: Optional[StatementProgress] = None) -> None:
        self.progress = progress  # the statement's counts, read by the shell while it runs (or None)
        self.cancelled = threading.Event()
        self.interrupted = interrupted or threading.Event()
        self.first_error: Optional[BaseException] = None
        self._lock = threading.Lock()

    def fail(self, error: BaseException) -> None:
        with self._lock:
            if self.first_error is None and not self.cancelled.is_set():
                self.first_error = error
        self.cancelled.set()

    def raise_if_cancelled(self) -> None:
        if self.interrupted.is_set():
            self.cancelled.set()
        if self.cancelled.is_set():
            raise self.first_error if self.first_error is not None else QueryCancelled("the statement was cancelled")

    def raise_if_failed(self) -> None:
        if self.first_error is not None:
            raise self.first_error
