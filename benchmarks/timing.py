"""Timing shared by the benchmark scripts: the best of a few runs after a warm-up."""
from __future__ import annotations

import math
import time
from typing import Callable


def best_of(repeats: int, run: Callable[[], object], warmup: bool = True) -> tuple[float, object]:
    """One untimed warm-up run (caches, page faults, BLAS start-up), then the best of `repeats` timed runs
    and the last run's output."""
    best, result = math.inf, None
    if warmup:
        result = run()
    for _ in range(repeats):
        started = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - started)
    return best, result
