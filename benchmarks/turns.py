"""Systems that take turns, each in a child process of its own: the child starts its libraries with its thread
count fixed, sets its system up once, then runs one step a request; the parent alternates the requests (a slow
spell of a shared machine falls on every system alike), compares what the steps return, and reads each child's
peak resident memory (VmHWM), which one process holding both systems could not tell apart.

A benchmark script runs itself as the child (`--child NAME`); `serve` answers the parent there. Requests and
replies are JSON lines on the child's stdin and stdout; anything the child prints goes to stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Callable, Optional

from timing import SETTLE_SECONDS, median_interval


def add_turn_options(parser: argparse.ArgumentParser, unit: str) -> None:
    """The options of every benchmark that takes turns: --profile (one more `unit`, trdb's under cProfile), --seed,
    and the child's own, hidden: --child NAME and --data FOLDER."""
    parser.add_argument("--profile", action="store_true", help=f"one more {unit}, trdb's under cProfile (to stderr)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)


def served_as_child(args: argparse.Namespace, child: Callable[[argparse.Namespace], None]) -> bool:
    """Where this process is a child (--child, its --threads a number): `child(args)` serves the parent, and True;
    else False (the parent goes on)."""
    if not args.child:
        return False
    args.threads = int(args.threads)
    child(args)
    return True


def thread_environment(threads: int) -> dict[str, str]:
    """The environment of a child limited to `threads` threads: BLAS, OpenMP (PyTorch's) and trdb's workers."""
    env = dict(os.environ)
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TRDB_WORKERS"):
        env[name] = str(threads)
    return env


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM): not `ru_maxrss`, which Linux keeps across the exec that
    started the child, so that it would begin at the parent's size when the child was forked."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Child:
    """One system in a child process: `python script --child name args...`."""

    def __init__(self, script: str, name: str, args: list[str], threads: int) -> None:
        self.name = name
        self.process = subprocess.Popen([sys.executable, script, "--child", name, *args], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=thread_environment(threads))
        self.ready = self._reply()  # after its setup: the setup's seconds and the RSS after its imports

    def _reply(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"{self.name}: the child process ended (exit status {self.process.wait()})")
        return json.loads(line)

    def call(self, request: str) -> dict:
        self.process.stdin.write(request + "\n")
        self.process.stdin.flush()
        return self._reply()

    def close(self) -> dict:
        """The child's last reply (its peak RSS and whatever its system reports at the end); it exits."""
        reply = self.call("quit")
        self.process.wait()
        return reply


def serve(setup: Callable[[], object], step: Callable[[object], dict],
          finish: Optional[Callable[[object], dict]] = None,
          before: Optional[Callable[[object], None]] = None) -> None:
    """The child's loop: `setup()` once, then `step(state)` for each 'step' request (its reply, and the wall and
    CPU seconds it took), after an untimed `before(state)` where given (a write that drops the work a statement
    carries to the next); `finish(state)` and the peak RSS on 'quit'; 'profile' runs a step under cProfile
    and prints the top functions to stderr."""
    out, sys.stdout = sys.stdout, sys.stderr
    imported = peak_rss_mb()
    started = time.perf_counter()
    state = setup()
    _send(out, {"setup_s": time.perf_counter() - started, "rss_after_imports_mb": imported})
    for request in sys.stdin:
        request = request.strip()
        if request == "quit":
            _send(out, {**(finish(state) if finish else {}), "peak_rss_mb": peak_rss_mb(),
                        "rss_after_imports_mb": imported})
            return
        if before is not None:
            before(state)
        if request == "profile":
            _send(out, _profiled(lambda: step(state)))
            continue
        started, cpu = time.perf_counter(), time.process_time()
        reply = step(state)
        _send(out, {**reply, "seconds": time.perf_counter() - started, "cpu_s": time.process_time() - cpu})


def _profiled(run: Callable[[], dict], top: int = 25) -> dict:
    import cProfile
    import pstats
    profile = cProfile.Profile()
    started = time.perf_counter()
    reply = profile.runcall(run)
    seconds = time.perf_counter() - started
    stats = pstats.Stats(profile, stream=sys.stderr).strip_dirs()
    print(f"\n# cProfile of one step ({seconds:.3f} s under the profiler), by own time:", file=sys.stderr)
    stats.sort_stats("tottime").print_stats(top)
    print("# by cumulative time:", file=sys.stderr)
    stats.sort_stats("cumulative").print_stats(top)
    return {**reply, "seconds": seconds}


def _send(out, message: dict) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def take_turns(children: list[Child], rounds: int, warmup: int = 1,
               request: str = "step") -> dict[str, list[dict]]:
    """`warmup` untimed rounds, then `rounds` rounds in which every child runs one step in turn (after
    SETTLE_SECONDS, so that BLAS threads the previous one left spinning have gone to sleep). Each child's
    replies, warm-up rounds first; the timed ones are the last `rounds`."""
    replies: dict[str, list[dict]] = {child.name: [] for child in children}
    for _ in range(warmup + rounds):
        for child in children:
            time.sleep(SETTLE_SECONDS)
            replies[child.name].append(child.call(request))
    return replies


def seconds(replies: list[dict], rounds: int) -> list[float]:
    return [reply["seconds"] for reply in replies[-rounds:]]


def cores_used(replies: list[dict], rounds: int) -> float:
    """CPU seconds over wall seconds of the timed steps: how many cores a system kept busy (at most its threads;
    less where its threads waited, for each other or for a core another process held)."""
    timed = replies[-rounds:]
    return sum(reply["cpu_s"] for reply in timed) / sum(reply["seconds"] for reply in timed)


def ratio_text(ours: list[float], theirs: list[float]) -> str:
    """The ratio of the medians, and the interval of the paired ratios' median (timing.median_interval)."""
    low, high, coverage = median_interval([a / b for a, b in zip(ours, theirs)])
    return f"{statistics.median(ours) / statistics.median(theirs):5.2f}x [{low:.2f}-{high:.2f} at {coverage:.0%}]"
