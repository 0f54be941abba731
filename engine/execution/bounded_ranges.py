"""Consecutive ranges of items whose sizes add up to at most a limit: a scan's reads, a join's output parts."""
from __future__ import annotations

from typing import Iterator

import numpy as np


def bounded_ranges(sizes: np.ndarray, limit: int) -> Iterator[tuple[int, int]]:
    """Consecutive (start, stop) ranges of rows whose sizes sum to at most `limit` (at least one row each)."""
    ends = np.cumsum(sizes)
    start = 0
    while start < len(sizes):
        before = int(ends[start - 1]) if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, before + limit, side="right")))
        yield start, stop
        start = stop
