"""Workers run plan fragments; CPU workers are threads of this process (a Ray executor implements the same)."""
from __future__ import annotations

import contextlib
import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, Optional, Protocol

from threadpoolctl import ThreadpoolController

from trdb.errors import OperationalError

# every BLAS loaded now (numpy's); their controllers are asked and set directly, which costs a third
# of threadpoolctl's limit() (~8 us against ~25 us a statement)
_BLAS = ThreadpoolController().select(user_api="blas").lib_controllers
IDLE = "trdb-idle"


# Threads kept between statements: starting one costs ~75 us, handing a task to an idle one ~12 us (a
# plan starts a thread per producer fragment). The pool never queues a task behind others (a queued
# producer could be the one the running ones wait for): it grows as the statements in flight need.
_POOL = ThreadPoolExecutor(max_workers=4096, thread_name_prefix=IDLE)


class Finished:
    """Set once by a thread that ends and waited for by another, which may be the main thread, where Ctrl-C
    lands: a flag and a plain lock taken with a timeout (one C call: a KeyboardInterrupt leaves the lock
    taken or not), never a threading.Event. Event.wait takes its Condition's lock and gives it back in
    Python code that a Ctrl-C can cut into; once in about twenty runs the shell then hung after Ctrl-C,
    its statement's thread waiting in set()."""

    def __init__(self) -> None:
        self._flag = False
        self._lock = threading.Lock()
        self._lock.acquire()  # released by set()

    def set(self) -> None:
        self._flag = True
        self._lock.release()

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Whether it is set, after waiting at most `timeout` seconds for it (None: as long as it takes)."""
        if not self._flag and self._lock.acquire(timeout=-1 if timeout is None else timeout):
            self._lock.release()  # a later wait returns at once
        return self._flag


def run_on_kept_thread(name: str, task: Callable[[], None], done: Finished) -> None:
    """Run `task` on a kept thread, named `name` while it runs, in a context of its own (as a new
    thread would: no context variable a task set reaches the next); `done` is set when it has ended.
    Raises OperationalError, and `task` never runs, when no thread is free and none can be started."""
    lock, state = threading.Lock(), {"abandoned": False, "started": False}

    def run() -> None:
        with lock:
            if state["abandoned"]:
                return
            state["started"] = True
        thread = threading.current_thread()
        thread.name = name
        try:
            contextvars.Context().run(task)
        finally:
            thread.name = IDLE
            done.set()
    try:
        _POOL.submit(run)
    except RuntimeError as exc:  # the task is queued, but no thread could start (a thread or address-space limit)
        with lock:
            if not state["started"]:  # a thread that frees up later drops it
                state["abandoned"] = True
                raise OperationalError(f"cannot start a worker thread: {exc}",
                                       hint="SET workers lower, or raise the process's limits on threads and "
                                            "address space (ulimit -u, ulimit -v)") from None


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """A context in which BLAS runs one thread: a small plan on one partition (its cost below
    min_parallel_cost) gains nothing from BLAS threads and loses to their hand-offs (a matrix-vector
    product on a busy machine: 90 ms with two threads, 12 ms with one). BLAS's thread count belongs to
    the process: statements of several connections at once share one limit, set by the first context
    to enter and lifted when the last one leaves (restoring what the count was before the first)."""
    _BLAS_LIMIT.enter()
    try:
        yield
    finally:
        _BLAS_LIMIT.leave()


def _set_threads(blas, threads: int) -> None:
    """BLAS's own setter: threadpoolctl's (3.8) lets only one Python thread set OpenBLAS's process-wide
    count, the first that did while it lives, and ignores the others, so a statement run on another
    thread (the shell's statement thread, a server's) would leave every worker all of BLAS's threads.
    The limit below is trdb's own coordination of that count across threads."""
    setter = getattr(blas, "_real_set_num_threads", None) or blas.set_num_threads
    setter(threads)


class _SharedBlasLimit:
    """One BLAS thread while any context holds the limit; the counts BLAS had before, back when none does."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._before: list[int] = []

    def enter(self) -> None:
        with self._lock:
            if self._holders == 0:
                self._before = [blas.get_num_threads() for blas in _BLAS]
                for blas in _BLAS:
                    _set_threads(blas, 1)
            self._holders += 1

    def leave(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0:
                for blas, threads in zip(_BLAS, self._before):
                    _set_threads(blas, threads)


_BLAS_LIMIT = _SharedBlasLimit()


class Workers(Protocol):
    """Where an execution runs its producer fragments."""

    def start(self, name: str, task: Callable[[], None]) -> None:
        """Run `task` (which never raises: it reports errors to the execution state)."""

    def join(self) -> None:
        """Wait until every started task has finished."""


class ThreadWorkers:
    """A kept thread per producer fragment; BLAS runs one thread per worker while any are running."""

    def __init__(self) -> None:
        self._done: list[Finished] = []
        self._blas_limit = None

    def start(self, name: str, task: Callable[[], None]) -> None:
        if self._blas_limit is None:
            # N workers, each calling BLAS, must not each start N BLAS threads (oversubscription)
            self._blas_limit = one_blas_thread()
            self._blas_limit.__enter__()
        self._launch(f"trdb-worker-{name}", task)

    def _launch(self, name: str, task: Callable[[], None]) -> None:
        done = Finished()
        run_on_kept_thread(name, task, done)  # one that cannot start is never waited for
        self._done.append(done)

    def join(self) -> None:
        # waits on Finished flags, not Thread.join(): a Ctrl-C landing inside join() can mark a thread
        # that is still running as stopped (CPython gh-90882)
        for done in self._done:
            done.wait()
        self._done.clear()
        if self._blas_limit is not None:
            self._blas_limit.__exit__(None, None, None)
            self._blas_limit = None
