"""Python's full garbage collections held off while statements run (young generations are still collected).

A full collection walks every object the process tracks, and a statement over many small tiles holds
millions of them (its tuples, keys, batches): Python's default (a full collection every 10 collections
of generation 1, once a quarter more objects survived) ran 19 full collections in an UPDATE of 120,000
tiles of 16 x 4, 1.2 s of its 4.1 s. While any statement runs, a full collection waits for 1,000 of them;
cycles among young objects (most of the garbage) are collected as before, and the process's own
thresholds come back when the last statement ends.
"""
from __future__ import annotations

import gc
import threading
from typing import Optional

GENERATION1_COLLECTIONS = 1000  # between full collections while a statement runs (Python's default: 10)


class _Deferral:
    """Entered by every running statement: the first in defers full collections, the last out restores
    the thresholds it found (unless someone changed them meanwhile: theirs are kept)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._saved: Optional[tuple[int, int, int]] = None
        self._ours: Optional[tuple[int, int, int]] = None

    def __enter__(self) -> None:
        with self._lock:
            if self._running == 0:
                self._saved = gc.get_threshold()
                self._ours = (self._saved[0], self._saved[1], max(self._saved[2], GENERATION1_COLLECTIONS))
                gc.set_threshold(*self._ours)
            self._running += 1

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._running -= 1
            if self._running == 0:
                if gc.get_threshold() == self._ours:
                    gc.set_threshold(*self._saved)
                self._saved = self._ours = None


_DEFERRAL = _Deferral()


def deferred() -> _Deferral:
    """A context in which full collections are deferred (statements of several threads share it)."""
    return _DEFERRAL
