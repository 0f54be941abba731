"""On the driver: the threads that pass a Ray execution's batches on, kept between statements.

Each fragment a statement ships to feed other actors (not the final gather's, which the gather
reads itself) has a driver task that reads the fragment's stream of batch references and forwards
them to the next actor; so does each scan on the driver. Those tasks wait on
Ray, not on the CPU, and run no BLAS, so they need no BLAS limit; starting a thread per task per
statement cost more than the tiny statements' whole work, so they run on the threads the local
executor keeps (workers.py).
"""
from __future__ import annotations

import threading
from typing import Callable

from trdb.execution.workers import ThreadWorkers

_RUNNING = [0]
_RUNNING_LOCK = threading.Lock()


def running() -> int:
    """Driver tasks of Ray executions running now, in this process (0 once every execution has ended)."""
    with _RUNNING_LOCK:
        return _RUNNING[0]


def _count(change: int) -> None:
    with _RUNNING_LOCK:
        _RUNNING[0] += change


class PooledWorkers(ThreadWorkers):
    """The `Workers` of a Ray execution: its driver tasks run on the process's kept threads, with no BLAS
    limit, counted in `running`."""

    def start(self, name: str, task: Callable[[], None]) -> None:
        def run() -> None:
            try:
                task()
            finally:
                _count(-1)
        _count(+1)
        self._launch(f"trdb-ray-forward-{name}", run)
