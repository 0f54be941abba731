"""The cost of going through Ray on one node: the same queries with executor 'ray' and 'local'.

Runs the dense matmul of parallel_matmul.py and the elementwise pipeline of
elementwise_pipeline.py at the same worker count with both executors on the same data, checks
every result against numpy and prints the ratio ray / local. To show where the difference goes,
it also times, in the same run, the pieces a Ray execution is made of: a statement that moves
almost nothing (the fixed cost per statement), an actor call's round trip, shipping a fragment,
and storing and reading back one batch of tiles through the object store.

    python benchmarks/ray_overhead.py [--workers 2] [--matmul-n 2048] [--elementwise-n 8192]
                                      [--tile 1024] [--repeats 3] [--address host:port]

Without --address a local Ray instance is started (or the running one is used, as ray.init does).
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import threadpoolctl

import trdb
from timing import best_of, check

MATMUL = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"
ELEMENTWISE = "SELECT E.i, E.j, SIGMOID(E.v * 2 + 1) AS v FROM E"
TINY = "SELECT COUNT(*) AS n FROM T"


def load(cur, args) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    n, e = args.matmul_n, args.elementwise_n
    data = {"A": rng.standard_normal((n, n), dtype=np.float32), "B": rng.standard_normal((n, n), dtype=np.float32),
            "E": rng.standard_normal((e, e), dtype=np.float32)}
    for name, array in data.items():
        cur.execute(f"CREATE TENSOR {name} FROM ? TILE ({args.tile}, {args.tile})", [array])
    cur.execute("CREATE TENSOR T SHAPE (4, 4) TILE (2, 2) FILL ONES")
    return data


def workloads(data: dict[str, np.ndarray]) -> list[tuple[str, str, np.ndarray, bool]]:
    A, B, E = data["A"], data["B"], data["E"]
    return [(f"matmul {A.shape[0]}", MATMUL, A @ B, True),
            (f"elementwise {E.shape[0]}", ELEMENTWISE, 1 / (1 + np.exp(-(E * 2 + 1))), True),
            ("tiny statement", TINY, None, False)]


def compare(cur, sql: str, expected, dense: bool, repeats: int) -> dict[str, float]:
    """The best time of each executor, their runs alternating (a busy machine slows both alike)."""
    run = (lambda: cur.execute(sql).fetch_tensor()) if dense else (lambda: cur.execute(sql).fetchall())
    best = {"local": float("inf"), "ray": float("inf")}
    for attempt in range(repeats + 1):
        for executor in best:
            cur.execute(f"SET executor = '{executor}'")
            seconds, result = best_of(1, run, warmup=False)
            if expected is not None:
                check(f"{sql[:30]} ({executor})", result, expected)
            if attempt:  # attempt 0 warms up (caches, actors, page faults)
                best[executor] = min(best[executor], seconds)
    return best


def pieces(args, fragment) -> list[tuple[str, float]]:
    """The costs a Ray execution is made of, measured on their own."""
    import ray
    from ray import cloudpickle  # what Ray ships fragments with

    from trdb.execution.ray.cluster import POOL

    actor = POOL.actors(args.workers, False)[0]
    ping, _ = best_of(20, lambda: ray.get(actor.ping.remote()))
    batch = [(i, 0, np.ones((args.tile, args.tile), np.float32)) for i in range(8)]
    put, _ = best_of(args.repeats, lambda: ray.put(batch))
    ref = ray.put(batch)
    get, _ = best_of(args.repeats, lambda: ray.get(ref))
    mib = sum(t.nbytes for *_, t in batch) / 2**20
    shipped, _ = best_of(20, lambda: cloudpickle.dumps(fragment))
    return [("actor call round trip (ping)", ping),
            (f"ray.put of one batch of 8 tiles ({mib:.0f} MiB)", put),
            ("ray.get of that batch (zero-copy)", get),
            (f"pickling one matmul fragment ({len(cloudpickle.dumps(fragment))} bytes)", shipped)]


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
    parser.add_argument("--matmul-n", type=int, default=2048)
    parser.add_argument("--elementwise-n", type=int, default=8192, help="16384 is elementwise_pipeline.py's 1 GiB")
    parser.add_argument("--tile", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--address", default=None, help="a running Ray cluster (default: as ray.init finds one)")
    args = parser.parse_args()
    os.environ.setdefault("TRDB_MIN_PARALLEL_COST", "0")  # every plan on `workers` partitions, however cheap
    for info in threadpoolctl.threadpool_info():
        print(f"# {info['internal_api']} {info.get('version')} {info.get('architecture')} "
              f"threads={info['num_threads']}")
    con = trdb.connect(workers=args.workers, address=args.address)
    cur = con.cursor()
    started = time.perf_counter()
    data = load(cur, args)
    print(f"# workers={args.workers} tile={args.tile}; data loaded in {time.perf_counter() - started:.1f} s; "
          f"seconds are the best of {args.repeats} runs after a warm-up, the executors alternating; "
          "results checked against numpy")
    fragment = last_fragment()
    print(f"{'workload':<22} {'local s':>9} {'ray s':>9} {'ray/local':>10}")
    for name, sql, expected, dense in workloads(data):
        best = compare(cur, sql, expected, dense, args.repeats)
        if name.startswith("matmul"):
            matmul_fragment = fragment()
        print(f"{name:<22} {best['local']:9.4f} {best['ray']:9.4f} {best['ray'] / best['local']:10.2f}")
    print("# where the time goes (each piece timed on its own):")
    for what, seconds in pieces(args, matmul_fragment):
        print(f"#   {what:<52} {seconds * 1000:9.3f} ms")
    con.close()


if __name__ == "__main__":
    main()
