"""What the benchmark scripts share: timed runs (a warm-up, then the best of a few, each after an untimed
`before` that drops carried work), and result checks against a float64 reference with float32 error bounds.

What stays warm across timed runs of trdb unless `before` says otherwise: the buffer pool (decoded
input tiles), the plan cache and the kernel caches; the previous statement's shared subplans (the
forward pass of a gradient) are dropped by any write, which is why gradient benchmarks write first.
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Callable, Optional, Union

import numpy as np

FLOAT32_UNIT_ROUNDOFF = float(np.finfo(np.float32).eps) / 2
# Before each timed run of systems taking turns: OpenBLAS's threads spin for about 0.1 s after a call
# before they sleep, so the run after numpy's A @ B shared the two cores with them (measured: trdb at 2
# workers 1.5x slower straight after it, 1.0-1.2x after this pause or with OPENBLAS_THREAD_TIMEOUT=4).
SETTLE_SECONDS = 0.15
# After such a pause, runs of about a millisecond stay slow for the next few milliseconds whatever runs
# them (measured on the EINSUM chain: trdb 1.21-1.29x numpy after one untimed run, 1.10x after three,
# 1.05x after ten or in a loop; busy-waiting instead of sleeping changes nothing): runs that short are
# warmed for this long before a timed run that should show the steady speed of a loop.
WARM_SECONDS = 0.02


def warmed(run: Callable[[], object], seconds: float = WARM_SECONDS) -> Callable[[], object]:
    """`run` repeated, untimed, until `seconds` have passed (once at least): a `before` that brings a short
    run to the speed it has in a loop (see WARM_SECONDS)."""
    def warm() -> object:
        started = time.perf_counter()
        result = run()
        while time.perf_counter() - started < seconds:
            result = run()
        return result
    return warm


def timed_runs(repeats: int, run: Callable[[], object], warmup: bool = True,
               before: Optional[Callable[[], object]] = None) -> tuple[list[float], object]:
    """Every timed run's seconds and the last output: one untimed warm-up run (caches, page faults, BLAS
    start-up), then `repeats` timed runs, each after an untimed call of `before` (a write that drops the
    work a statement carries to the next)."""
    result, times = None, []
    if warmup:
        if before is not None:
            before()
        result = run()
    for _ in range(repeats):
        if before is not None:
            before()
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
    return times, result


def best_of(repeats: int, run: Callable[[], object], warmup: bool = True,
            before: Optional[Callable[[], object]] = None) -> tuple[float, object]:
    """The best of `timed_runs` and the last run's output."""
    times, result = timed_runs(repeats, run, warmup, before)
    return min(times, default=math.inf), result


def alternating_runs(repeats: int, runs: dict[str, Callable[[], object]],
                     before: Optional[dict[str, Callable[[], object]]] = None) -> dict[str, tuple[list[float], object]]:
    """Every system's timed runs, taking turns (each round times every system once, after one warm-up
    round), so that a slow spell of the machine (another tenant of the host, CPU frequency) falls on
    all of them alike. A pause of SETTLE_SECONDS lets the threads the previous system left spinning go to
    sleep; then `before[name]`, where given, runs untimed before each of that system's runs.
    Returns each system's run times, round by round, and last output."""
    before = before or {}
    prepare = {name: before.get(name, lambda: None) for name in runs}
    results = {}
    for name, run in runs.items():  # warm-up
        prepare[name]()
        results[name] = run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            time.sleep(SETTLE_SECONDS)
            prepare[name]()
            started = time.perf_counter()
            results[name] = run()
            times[name].append(time.perf_counter() - started)
    return {name: (times[name], results[name]) for name in runs}


def best_of_alternating(repeats: int, runs: dict[str, Callable[[], object]],
                        before: Optional[dict[str, Callable[[], object]]] = None) -> dict[str, tuple[float, object]]:
    """`alternating_runs`' best time and last output of each system."""
    return {name: (min(times), result) for name, (times, result) in alternating_runs(repeats, runs, before).items()}


def paired_ratio(times: list[float], base: list[float]) -> tuple[float, float, float]:
    """(lowest, median, highest) of the ratios of runs made in the same round: on a busy machine the
    median of such pairs is steadier than the ratio of two best times, and the spread shows the noise."""
    ratios = sorted(t / b for t, b in zip(times, base))
    return ratios[0], statistics.median(ratios), ratios[-1]


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(low, high, coverage): a distribution-free interval that holds the median of what `values` sample
    with probability `coverage`, at least `confidence` where there are enough values (21 values: the 6th
    and 16th smallest, 97%); with too few, the lowest and highest (5 values: 94%). From the order
    statistics: the count of values below the median is Binomial(n, 1/2), taking the values (rounds of
    systems taking turns) as independent."""
    ordered, n = sorted(values), len(values)
    tail = (1 - confidence) / 2

    def below(k: int) -> float:  # P(at most k of the values lie below the median)
        return sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    rank = 1  # 1-based, of the interval's low end; the high end is as far from the top
    while rank + 1 <= (n + 1) // 2 and below(rank) <= tail:
        rank += 1
    outside = below(rank - 1)
    return ordered[rank - 1], ordered[n - rank], 1 - 2 * outside


def paired_interval(times: list[float], base: list[float]) -> str:
    """The interval of the paired ratios' median (`median_interval`) as text: [low-high at coverage]."""
    low, high, coverage = median_interval([t / b for t, b in zip(times, base)])
    return f"[{low:.2f}-{high:.2f} at {coverage:.0%}]"


def paired_summary(times: list[float], base: list[float]) -> str:
    """The paired ratios' lowest, median (with its interval, `paired_interval`) and highest, as text."""
    low, mid, high = paired_ratio(times, base)
    return f"min {low:.2f} median {mid:.2f} {paired_interval(times, base)} max {high:.2f}"


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


def gamma(n: int) -> float:
    """The classic bound on the relative rounding error of n float32 operations in any order: n*u / (1 - n*u)."""
    return n * FLOAT32_UNIT_ROUNDOFF / (1 - n * FLOAT32_UNIT_ROUNDOFF)


def product_bound(a, b) -> np.ndarray:
    """Elementwise bound on |fl32(a @ b) - a @ b| for float32 operands in any summation order (tiles,
    threads, BLAS blocking): gamma(k) * (|a| @ |b|), in float64. `a` may be a scipy sparse matrix."""
    k = a.shape[1]
    return gamma(k) * np.asarray(abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))


def check(name: str, result: np.ndarray, expected: np.ndarray, bound: Union[float, np.ndarray, None] = None,
          relative: float = 1e-4) -> None:
    """Stop the benchmark when a result is wrong: its shape, or an error against the float64 `expected`
    above `bound` (elementwise, e.g. `product_bound`), or without one above `relative` x max |expected|."""
    if result.shape != expected.shape:
        raise SystemExit(f"{name}: shape {result.shape} != {expected.shape}")
    error = np.abs(np.asarray(result, dtype=np.float64) - expected)
    if bound is None:
        bound = relative * float(np.abs(expected).max())
    if not np.all(error <= bound):
        worst = np.unravel_index(np.argmax(error - bound), error.shape) if error.ndim else ()
        raise SystemExit(f"{name}: wrong result (abs error {float(error[worst]):.3g} > bound "
                         f"{float(np.broadcast_to(bound, error.shape)[worst]):.3g} at {worst})")
