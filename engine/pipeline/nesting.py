"""Deeply nested statements: room on the Python stack to plan them, and a clear error past that room."""
from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Iterator, Optional

from trdb.errors import ProgrammingError

# Binding, optimizing, planning and running a plan recurse once per operator or so: a 300-way join
# or 300 chained CTEs need a few thousand frames, more than Python's default 1000. The limit is
# raised while any statement plans or runs and put back after the last one (it is process-wide);
# deep enough for thousands of operators and well inside the C stack of a thread (Python 3.11
# calls between Python functions use no C stack).
RECURSION_LIMIT = 20000
_lock = threading.Lock()
_active: set[object] = set()    # a token per statement planning or running
_saved: Optional[int] = None    # the limit to put back, while it is raised


@contextmanager
def nesting_guard() -> Iterator[None]:
    """Run planning or execution with RECURSION_LIMIT frames; deeper statements get a ProgrammingError."""
    token = object()  # entered inside the try: a Ctrl-C anywhere in _enter still puts the limit back
    try:
        _enter(token)
        yield
    except RecursionError:
        raise ProgrammingError("the statement nests too deeply for trdb to plan it (too many chained "
                               "joins, subqueries, CTEs or operators)",
                               hint="split it: store intermediate results with CREATE TENSOR ... AS") from None
    finally:
        _leave(token)


def _enter(token: object) -> None:
    global _saved
    with _lock:
        if _saved is None:
            _saved = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_saved, RECURSION_LIMIT))
        _active.add(token)


def _leave(token: object) -> None:
    global _saved
    with _lock:
        _active.discard(token)
        if not _active and _saved is not None:
            sys.setrecursionlimit(_saved)
            _saved = None
