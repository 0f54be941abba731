"""Deeply nested statements: room on the Python stack to plan them, and a clear error past that room."""
from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Iterator

from trdb.errors import ProgrammingError

# Binding, optimizing, planning and running a plan recurse once per operator or so: a 300-way join
# or 300 chained CTEs need a few thousand frames, more than Python's default 1000. The limit is
# raised while any statement plans or runs and put back after the last one (it is process-wide);
# deep enough for thousands of operators and well inside the C stack of a thread (Python 3.11
# calls between Python functions use no C stack).
RECURSION_LIMIT = 20000
_lock = threading.Lock()
_active = 0
_saved = 0


@contextmanager
def nesting_guard() -> Iterator[None]:
    """Run planning or execution with RECURSION_LIMIT frames; deeper statements get a ProgrammingError."""
    _enter()
    try:
        yield
    except RecursionError:
        raise ProgrammingError("the statement nests too deeply for trdb to plan it (too many chained "
                               "joins, subqueries, CTEs or operators)",
                               hint="split it: store intermediate results with CREATE TENSOR ... AS") from None
    finally:
        _leave()


def _enter() -> None:
    global _active, _saved
    with _lock:
        if _active == 0:
            _saved = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_saved, RECURSION_LIMIT))
        _active += 1


def _leave() -> None:
    global _active
    with _lock:
        _active -= 1
        if _active == 0:
            sys.setrecursionlimit(_saved)
