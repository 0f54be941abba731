"""The cost of going through Ray: the same queries with executor 'ray' and 'local', on a 2-node cluster.

Runs the dense matmul of parallel_matmul.py at two sizes and a tiny statement (a filter and a
scalar multiply of a 4 x 4 tensor) at the same worker count with both executors on the same data,
checks the matmuls against numpy and prints the ratio ray / local. Its peer on Ray is the same matmul
written by hand as a Ray program (actors holding the tiles, streaming the product's tiles to the
driver through the object store): what Ray itself costs here for a result that crosses it (trdb's
actors on the driver's machine write the product into the driver's array instead). The tiny statement is all fixed
cost; to show where it goes, its phases are timed in the same run (statement start to the Ray
execution, setting it up, submitting the fragments, waiting for their results, ending it), and
so are an actor call's round trip and pickling its fragment.

    python benchmarks/ray_overhead.py [--workers 2] [--sizes 4096,2048] [--tile 1024]
                                      [--repeats 3] [--tiny-runs 60] [--address host:port]

The matmuls and the first tiny statement run on `workers` partitions however cheap (min_parallel_cost
0); the tiny statement runs again at the default min_parallel_cost, where the planner puts a plan that
cheap on one partition (one fragment, one actor call), as it does for a user.

Without --address it starts a Ray cluster of two nodes on this machine, all on 127.0.0.1 (one CPU
each, as the test suite's: the two workers' actors run on different nodes), and stops it at the end;
with --nodes 1, a cluster of one node with `workers` CPUs (the actors share its object store, so their
results reach the driver through shared memory instead of the object manager's transfer between nodes).
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
OBJECT_STORE_BYTES = 1 << 30  # per node of a cluster started here


@contextmanager
def local_cluster(address, nodes: int = 2, cpus_per_node: int = 1):
    """Ray on `address`, else a cluster of `nodes` nodes started here on 127.0.0.1 (token authentication),
    each with `cpus_per_node` CPUs."""
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
    # an object store of 1 GiB per node: the default here (150 MB) is too small for two programs of
    # 64 MB results at once (the matmul and its peer): one spills the other's to disk
    node = {"num_cpus": cpus_per_node, "node_ip_address": "127.0.0.1", "object_store_memory": OBJECT_STORE_BYTES}
    cluster = Cluster(initialize_head=True, head_node_args=dict(node, include_dashboard=False))
    try:
        for _ in range(nodes - 1):
            cluster.add_node(**node)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        yield
    finally:
        ray.shutdown()
        cluster.shutdown()


def alternate(cur, sql: str, runs: int, expected=None, others=None) -> dict[str, list[float]]:
    """Seconds of each run per executor (and of each of `others`, name: a function returning the result),
    taking turns (a busy machine slows all alike); the first run of each is a warm-up (caches, actors,
    partitions kept in them) and not counted."""
    def executor(name):
        def run():
            cur.execute(f"SET executor = '{name}'")
            result = cur.execute(sql)
            return result.fetch_tensor() if expected is not None else result.fetchall()
        return run
    systems = {"local": executor("local"), "ray": executor("ray"), **(others or {})}
    times: dict[str, list[float]] = {name: [] for name in systems}
    for attempt in range(runs + 1):
        for name, run in systems.items():
            seconds, result = best_of(1, run, warmup=False)
            if expected is not None:
                check(f"{sql[:30]} ({name})", result, expected)
            if attempt:
                times[name].append(seconds)
    return times


def hand_written_matmul(a: np.ndarray, b: np.ndarray, tile: int, workers: int):
    """The same matmul as a hand-written Ray program, trdb's peer: `workers` actors, spread over the nodes
    as trdb's are (taking no CPU of Ray's: trdb's actors hold those), hold the row tiles of A whose index
    is theirs modulo `workers` and all of B (sent once, untimed: trdb keeps its partitions in its actors
    too); each computes its tiles of the product and streams them to the driver as they are done, which
    places them as they arrive. Returns the function that runs it once, and the one that ends its actors."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0)
    class Rows:
        def load(self, a_tiles: dict, b_tiles: dict) -> None:
            self.a, self.b = a_tiles, b_tiles  # copied out of the object store, which it leaves

        def product(self):
            rows, columns = sorted({i for i, _ in self.a}), sorted({k for _, k in self.b})
            inner = sorted({j for _, j in self.b})
            for i in rows:
                for k in columns:
                    c = self.a[i, inner[0]] @ self.b[inner[0], k]
                    for j in inner[1:]:
                        c += self.a[i, j] @ self.b[j, k]
                    yield i, k, c

    def tiles(m: np.ndarray) -> dict:
        return {(i // tile, j // tile): np.ascontiguousarray(m[i:i + tile, j:j + tile])
                for i in range(0, m.shape[0], tile) for j in range(0, m.shape[1], tile)}
    a_tiles, b_tiles = tiles(a), tiles(b)
    nodes = sorted(node["NodeID"] for node in ray.nodes() if node["Alive"])
    actors = [Rows.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[w % len(nodes)], soft=False))
              .remote() for w in range(workers)]
    for w, actor in enumerate(actors):  # one at a time: the object store holds one actor's inputs at once
        ray.get(actor.load.remote({key: t for key, t in a_tiles.items() if key[0] % workers == w}, b_tiles))

    def run() -> np.ndarray:
        out = np.empty((a.shape[0], b.shape[1]), dtype=np.float32)
        streams = [actor.product.remote() for actor in actors]
        while streams:
            ready, _ = ray.wait(streams, num_returns=1)
            try:
                i, k, c = ray.get(next(ready[0]))
            except StopIteration:
                streams.remove(ready[0])
                continue
            out[i * tile:(i + 1) * tile, k * tile:(k + 1) * tile] = c
        return out

    def end() -> None:
        for actor in actors:
            ray.kill(actor)
    return run, end


class Phases:
    """A spy on Ray executions: when each phase of one statement ends, relative to its start."""

    def __init__(self) -> None:
        from trdb.execution.ray.driver.execution import RayExecution
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

    from trdb.execution.ray.driver.cluster import POOL
    actors = POOL.actors(workers, False)
    ping, _ = best_of(30, lambda: ray.get([actor.ping.remote() for actor in actors]))
    pickled, _ = best_of(30, lambda: cloudpickle.dumps(fragment))
    return [(f"an actor call to each of the {workers} actors, in parallel (round trip)", ping),
            (f"pickling one fragment ({len(cloudpickle.dumps(fragment))} bytes; sent once per actor and plan)",
             pickled)]


def last_fragment():
    """A spy on Ray executions: returns a function giving a fragment (operators) the last one shipped."""
    from trdb.execution.ray.driver.execution import RayExecution
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
    parser.add_argument("--address", default=None, help="a running Ray cluster (default: one started here)")
    parser.add_argument("--nodes", type=int, default=2, choices=(1, 2),
                        help="nodes of the cluster started here: 2 (one CPU each), or 1 (with `workers` CPUs)")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    shape = (2, 1) if args.nodes == 2 else (1, args.workers)
    with local_cluster(args.address, *shape):
        con = trdb.connect(workers=args.workers)
        cur = con.cursor()
        cur.execute("SET min_parallel_cost = 0")  # every plan on `workers` partitions, however cheap
        # the same plan on both executors: tile products (on the local executor these products would run on
        # whole arrays, which the Ray executor's actors, holding partitions, cannot: printed apart below)
        cur.execute("SET dense_einsum_bytes = 0")
        rng = np.random.default_rng(7)
        data, inputs = {}, {}
        for n in sizes:
            a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in "AB")
            cur.execute(f"CREATE TENSOR A{n} FROM ? TILE ({args.tile}, {args.tile})", [a])
            cur.execute(f"CREATE TENSOR B{n} FROM ? TILE ({args.tile}, {args.tile})", [b])
            data[n], inputs[n] = a @ b, (a, b)
        cur.execute("CREATE TENSOR T SHAPE (4, 4) TILE (2, 2) FILL ONES")
        where = args.address or (f"{args.nodes}-node cluster on 127.0.0.1 ({shape[1]} CPU each)")
        print(f"# Ray: {where}; workers={args.workers} tile={args.tile}, {os.cpu_count()} cores, load average "
              f"{os.getloadavg()[0]:.1f}; matmuls: best of {args.repeats} runs after a warm-up, the executors "
              f"alternating, results checked against numpy; tiny statement: {args.tiny_runs} runs")
        fragment = last_fragment()
        print(f"{'workload':<32} {'local':>10} {'ray':>10} {'ray/local':>10} {'hand-written Ray':>17} "
              f"{'/local':>7}")
        for n in sizes:
            cur.execute("SET executor = 'ray'")
            cur.execute(TINY).fetchall()  # trdb's actors first: they take the CPUs Ray has
            hand, end = hand_written_matmul(*inputs[n], args.tile, args.workers)
            peer = {"hand-written Ray": hand}
            best = {k: min(v) for k, v in alternate(cur, MATMUL.format(n=n), args.repeats, data[n], peer).items()}
            end()
            hand = best["hand-written Ray"]
            print(f"{f'matmul {n}':<32} {best['local']:9.3f}s {best['ray']:9.3f}s {best['ray'] / best['local']:10.2f} "
                  f"{hand:16.3f}s {hand / best['local']:7.2f}")
            cur.execute("SET executor = 'local'")
            cur.execute("RESET dense_einsum_bytes")
            whole, _ = best_of(args.repeats, lambda: cur.execute(MATMUL.format(n=n)).fetch_tensor())
            cur.execute("SET dense_einsum_bytes = 0")
            print(f"{'  local on whole arrays':<32} {whole:9.3f}s {'':10} {best['ray'] / whole:10.2f}")
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
