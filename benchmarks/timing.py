"""What the benchmark scripts share: the best of a few timed runs after a warm-up, and result checks."""
from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np


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


def best_of_alternating(repeats: int, runs: dict[str, Callable[[], object]]) -> dict[str, tuple[float, object]]:
    """`best_of` for a few systems at once, taking turns (each round times every system once), so
    that a slow spell of the machine (another tenant of the host, CPU frequency) falls on all of them
    alike. Returns each system's best time and last output."""
    results = {name: run() for name, run in runs.items()}  # warm-up
    best = {name: math.inf for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            started = time.perf_counter()
            results[name] = run()
            best[name] = min(best[name], time.perf_counter() - started)
    return {name: (best[name], results[name]) for name in runs}


def print_ratios(times: dict[str, float], base: str, label: str, width: int = 32) -> None:
    """A table of each run's seconds and its ratio to the run named `base` (column title `label`)."""
    print(f"{'run':<{width}} {'seconds':>9} {label:>19}")
    for name, seconds in times.items():
        print(f"{name:<{width}} {seconds:9.4f} {seconds / times[base]:19.3f}")


def print_plans(plans: dict) -> None:
    """EXPLAIN of the plan chosen at each worker count."""
    for workers, plan in plans.items():
        print(f"\n# EXPLAIN, workers={workers}:")
        print(plan)


def check(name: str, result: np.ndarray, expected: np.ndarray, relative: float = 1e-4) -> None:
    """Stop the benchmark when a result is wrong: its shape, or an error above `relative` x max |expected|."""
    if result.shape != expected.shape:
        raise SystemExit(f"{name}: shape {result.shape} != {expected.shape}")
    error = float(np.abs(result - expected).max())
    bound = relative * float(np.abs(expected).max())
    if error > bound:
        raise SystemExit(f"{name}: wrong result (max abs error {error:.3g} > {bound:.3g})")
