"""The cost of going through Ray: the same queries with executor 'ray' and 'local', on a 2-node cluster.

Runs the dense matmul of parallel_matmul.py at two sizes and a tiny statement (a filter and a
scalar multiply of a 4 x 4 tensor) at the same worker count with both executors on the same data,
checks the matmuls against numpy and prints the ratio ray / local. The tiny statement is all fixed
cost; to show where it goes, its phases are timed in the same run (statement start to the Ray
execution, setting it up, submitting the fragments, waiting for their results, ending it), and
so are an actor call's round trip and pickling its fragment.

    python benchmarks/ray_overhead.py [--workers 2] [--sizes 4096,2048] [--tile 1024]
                                      [--repeats 3] [--tiny-runs 60] [--address host:port]

The matmuls and the first tiny statement run on `workers` partitions however cheap (min_parallel_cost
0); the tiny statement runs again at the default min_parallel_cost, where the planner puts a plan that
cheap on one partition (one fragment, one actor call), as it does for a user.

Without --address it starts a Ray cluster of two nodes on this machine, all on 127.0.0.1 (one CPU
each, as the test suite's: the two workers' actors run on different nodes), and stops it at the end.
"""
from __future__ import annotations

import argparse
import os
import secrets
import statistics
import time
from contextlib import contextmanager

import numpy as np

import trdb
from timing import best_of, check

MATMUL = ("SELECT A{n}.i, B{n}.j, SUM(MATMUL(A{n}.v, B{n}.v)) AS v FROM A{n} JOIN B{n} ON A{n}.j = B{n}.i "
          "GROUP BY A{n}.i, B{n}.j")
TINY = "SELECT T.i, T.j, T.v * 2 AS v FROM T WHERE T.i = 0"


@contextmanager
def two_node_cluster(address):
    """Ray on `address`, else a cluster of two nodes started here on 127.0.0.1 (token authentication)."""
    if address:
        import ray
        ray.init(address=address, log_to_driver=False)
        yield
        return
    os.environ.setdefault("RAY_AUTH_MODE", "token")  # read when Ray is imported: set before
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every address the loopback one
    import ray
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster
    ray_constants.ENABLE_RAY_CLUSTER = False
    node = {"num_cpus": 1, "node_ip_address": "127.0.0.1"}
    nodes = Cluster(initialize_head=True, head_node_args=dict(node, include_dashboard=False))
    try:
        nodes.add_node(**node)
        nodes.wait_for_nodes()
        ray.init(address=nodes.address, log_to_driver=False)
        yield
    finally:
        ray.shutdown()
        nodes.shutdown()


def alternate(cur, sql: str, runs: int, expected=None) -> dict[str, list[float]]:
    """Seconds of each run per executor, the executors alternating (a busy machine slows both alike);
    the first run of each is a warm-up (caches, actors, partitions kept in them) and not counted."""
    times: dict[str, list[float]] = {"local": [], "ray": []}
    for attempt in range(runs + 1):
        for executor in times:
            cur.execute(f"SET executor = '{executor}'")
            if expected is not None:
                seconds, result = best_of(1, lambda: cur.execute(sql).fetch_tensor(), warmup=False)
                check(f"{sql[:30]} ({executor})", result, expected)
            else:
                seconds, _ = best_of(1, lambda: cur.execute(sql).fetchall(), warmup=False)
            if attempt:
                times[executor].append(seconds)
    return times


class Phases:
    """A spy on Ray executions: when each phase of one statement ends, relative to its start."""

    def __init__(self) -> None:
        from trdb.execution.ray.execution import RayExecution
        self.marks: dict[str, float] = {}
        spy = self

        def wrap(name, before, after):
            original = getattr(RayExecution, name)

            def method(self, *args, **options):
                if before:
                    spy.mark(before)
                result = original(self, *args, **options)
                if after:
                    spy.mark(after)
                return result
            setattr(RayExecution, name, method)
        wrap("__init__", "planned", "set up")
        wrap("__enter__", None, "submitted")
        wrap("_take", "results in", None)  # each item of each fragment, as it arrives
        wrap("__exit__", "gathered", "ended")

    def mark(self, name: str) -> None:
        self.marks[name] = time.perf_counter()  # the last of several (each fragment's result) wins

    def run(self, cur, sql: str, runs: int) -> dict[str, list[float]]:
        """Milliseconds of each phase of `runs` statements."""
        phases: dict[str, list[float]] = {}
        for _ in range(runs):
            self.marks = {}
            started = time.perf_counter()
            cur.execute(sql).fetchall()
            done = time.perf_counter()
            last = started
            for name in ("planned", "set up", "submitted", "results in", "gathered", "ended"):
                phases.setdefault(name, []).append((self.marks[name] - last) * 1000)
                last = self.marks[name]
            phases.setdefault("returned", []).append((done - last) * 1000)
        return phases


PHASES = {"planned": "parse, plan (cached), start the execution",
          "set up": "actors checked (no call), scans' kept partitions found",
          "submitted": "fragments instantiated, submitted (each a key: cached by plan)",
          "results in": "waiting for the last fragment's result: Ray's round trip and the fragments' run",
          "gathered": "the results through the final gather, the operators above it",
          "ended": "execution ended (releases deferred to the next call)",
          "returned": "rows to the cursor"}


def pieces(workers: int, fragment) -> list[tuple[str, float]]:
    """Two costs a Ray statement is made of, measured on their own."""
    import ray
    from ray import cloudpickle

    from trdb.execution.ray.cluster import POOL
    actors = POOL.actors(workers, False)
    ping, _ = best_of(30, lambda: ray.get([actor.ping.remote() for actor in actors]))
    pickled, _ = best_of(30, lambda: cloudpickle.dumps(fragment))
    return [(f"an actor call to each of the {workers} actors, in parallel (round trip)", ping),
            (f"pickling one fragment ({len(cloudpickle.dumps(fragment))} bytes; sent once per actor and plan)",
             pickled)]


def last_fragment():
    """A spy on Ray executions: returns a function giving a fragment (operators) the last one shipped."""
    from trdb.execution.ray.execution import RayExecution
    seen = []
    enter = RayExecution.__enter__
    RayExecution.__enter__ = lambda self: seen.append(self) or enter(self)
    return lambda: seen[-1].instances[id(seen[-1].root.children[0])][0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sizes", default="4096,2048", help="matmul sizes, n x n float32")
    parser.add_argument("--tile", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each matmul per executor")
    parser.add_argument("--tiny-runs", type=int, default=60, help="timed runs of the tiny statement per executor")
    parser.add_argument("--address", default=None, help="a running Ray cluster (default: a 2-node one started here)")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    with two_node_cluster(args.address):
        con = trdb.connect(workers=args.workers)
        cur = con.cursor()
        cur.execute("SET min_parallel_cost = 0")  # every plan on `workers` partitions, however cheap
        rng = np.random.default_rng(7)
        data = {}
        for n in sizes:
            a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in "AB")
            cur.execute(f"CREATE TENSOR A{n} FROM ? TILE ({args.tile}, {args.tile})", [a])
            cur.execute(f"CREATE TENSOR B{n} FROM ? TILE ({args.tile}, {args.tile})", [b])
            data[n] = a @ b
        cur.execute("CREATE TENSOR T SHAPE (4, 4) TILE (2, 2) FILL ONES")
        print(f"# workers={args.workers} tile={args.tile}, {os.cpu_count()} cores, load average "
              f"{os.getloadavg()[0]:.1f}; matmuls: best of {args.repeats} runs after a warm-up, the executors "
              f"alternating, results checked against numpy; tiny statement: {args.tiny_runs} runs")
        fragment = last_fragment()
        print(f"{'workload':<32} {'local':>10} {'ray':>10} {'ray/local':>10}")
        for n in sizes:
            best = {k: min(v) for k, v in alternate(cur, MATMUL.format(n=n), args.repeats, data[n]).items()}
            print(f"{f'matmul {n}':<32} {best['local']:9.3f}s {best['ray']:9.3f}s {best['ray'] / best['local']:10.2f}")
        for partitions, setting in (("2 partitions", "SET min_parallel_cost = 0"),
                                    ("planner's choice", "RESET min_parallel_cost")):
            cur.execute(setting)
            tiny = alternate(cur, TINY, args.tiny_runs)
            for name, pick in (("best", min), ("median", statistics.median)):
                local, ray_ = pick(tiny["local"]) * 1000, pick(tiny["ray"]) * 1000
                print(f"{f'tiny, {partitions}, {name}':<32} {local:8.2f}ms {ray_:8.2f}ms {ray_ / local:10.2f}")
        cur.execute("SET min_parallel_cost = 0")
        cur.execute("SET executor = 'ray'")
        tiny_fragment = fragment()
        phases = Phases().run(cur, TINY, args.tiny_runs)
        print("# where the tiny statement's time goes with Ray (median ms of each phase):")
        for name, what in PHASES.items():
            print(f"#   {name:<11} {statistics.median(phases[name]):7.2f}  {what}")
        for what, seconds in pieces(args.workers, tiny_fragment):
            print(f"#   {what}: {seconds * 1000:.2f} ms")
        con.close()


if __name__ == "__main__":
    main()
