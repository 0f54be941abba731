"""Workers run plan fragments; CPU workers are threads of this process (a Ray executor implements the same)."""
from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator, Protocol

from threadpoolctl import ThreadpoolController

# every BLAS loaded now (numpy's); their controllers are asked and set directly, which costs a third
# of threadpoolctl's limit() (~8 us against ~25 us a statement)
_BLAS = ThreadpoolController().select(user_api="blas").lib_controllers


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """A context in which BLAS runs one thread: a small plan on one partition (its cost below
    min_parallel_cost) gains nothing from BLAS threads and loses to their hand-offs (a matrix-vector
    product on a busy machine: 90 ms with two threads, 12 ms with one)."""
    before = [blas.get_num_threads() for blas in _BLAS]
    for blas in _BLAS:
        blas.set_num_threads(1)
    try:
        yield
    finally:
        for blas, threads in zip(_BLAS, before):
            blas.set_num_threads(threads)


class Workers(Protocol):
    """Where an execution runs its producer fragments."""

    def start(self, name: str, task: Callable[[], None]) -> None:
        """Run `task` (which never raises: it reports errors to the execution state)."""

    def join(self) -> None:
        """Wait until every started task has finished."""


class ThreadWorkers:
    """One thread per producer fragment; BLAS runs one thread per worker while any are running."""

    def __init__(self) -> None:
        self._threads: list[tuple[threading.Thread, threading.Event]] = []
        self._blas_limit = None

    def start(self, name: str, task: Callable[[], None]) -> None:
        if self._blas_limit is None:
            # N workers, each calling BLAS, must not each start N BLAS threads (oversubscription)
            self._blas_limit = one_blas_thread()
            self._blas_limit.__enter__()
        done = threading.Event()

        def run() -> None:
            try:
                task()
            finally:
                done.set()
        thread = threading.Thread(target=run, name=f"trdb-worker-{name}", daemon=True)
        self._threads.append((thread, done))
        thread.start()

    def join(self) -> None:
        # waits on events, not Thread.join(): a Ctrl-C landing inside join() can mark a thread that
        # is still running as stopped (CPython gh-90882)
        for thread, done in self._threads:
            done.wait()
        self._threads.clear()
        if self._blas_limit is not None:
            self._blas_limit.__exit__(None, None, None)
            self._blas_limit = None
