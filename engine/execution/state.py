"""The state one execution's operators share across workers: cancellation and the first error."""
from __future__ import annotations

import threading
from typing import Optional

from trdb.errors import QueryCancelled


class ExecutionState:
    """What all instances of one execution share: the cancellation flag and the first error."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.first_error: Optional[BaseException] = None
        self._lock = threading.Lock()

    def fail(self, error: BaseException) -> None:
        with self._lock:
            if self.first_error is None and not self.cancelled.is_set():
                self.first_error = error
        self.cancelled.set()

    def raise_if_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise self.first_error if self.first_error is not None else QueryCancelled("the statement was cancelled")

    def raise_if_failed(self) -> None:
        if self.first_error is not None:
            raise self.first_error
