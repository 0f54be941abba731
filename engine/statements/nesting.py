"""Deeply nested statements: room on the Python stack to plan them, and a clear error past that room."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

from trdb.errors import ProgrammingError

# Binding, optimizing, planning and running a plan recurse once per operator or so: a 300-way join
# or 300 chained CTEs need a few thousand frames, more than Python's default 1000. Raised once,
# never lowered (other threads may be planning too); deep enough for thousands of operators and
# well inside the C stack of a thread (Python 3.11 calls between Python functions use no C stack).
RECURSION_LIMIT = 20000


@contextmanager
def nesting_guard() -> Iterator[None]:
    """Run planning or execution with RECURSION_LIMIT frames; deeper statements get a ProgrammingError."""
    if sys.getrecursionlimit() < RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)
    try:
        yield
    except RecursionError:
        raise ProgrammingError("the statement nests too deeply for trdb to plan it (too many chained "
                               "joins, subqueries, CTEs or operators)",
                               hint="split it: store intermediate results with CREATE TENSOR ... AS") from None
