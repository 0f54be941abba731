"""Connections the garbage collector frees are closed after the collection, never inside it.

The collector runs at any allocation, so also while trdb holds one of its locks (a file's memory
accounting, the open files'); a connection it frees closes itself, which gives back its carried tuples'
memory and its file under those locks, on the same thread, and hung. Such a close waits in a list until
the next `connect` or statement of any connection (a thread started inside a collection may never run:
at exit it hung too); a connection whose last reference is dropped outside a collection closes at once."""
from __future__ import annotations

import atexit
import gc
import threading
from typing import Callable

_collecting = threading.Event()
_pending: list[Callable[[], None]] = []


def _note_collection(phase: str, info: dict) -> None:
    if phase == "start":
        _collecting.set()
    else:
        _collecting.clear()


gc.callbacks.append(_note_collection)


def close_when_freed(close: Callable[[], None]) -> None:
    """Run `close` now, or after the collection where the collector is running (a __del__ during it)."""
    if _collecting.is_set():
        _pending.append(close)
    else:
        close()


def close_pending() -> None:
    """Close the connections the collector freed so far (called where trdb holds no lock)."""
    while _pending:
        try:
            close = _pending.pop()
        except IndexError:  # another thread took the last one
            return
        try:
            close()
        except Exception:  # as __del__ swallows it: a connection that cannot close has nothing left to lose
            pass


atexit.register(close_pending)
