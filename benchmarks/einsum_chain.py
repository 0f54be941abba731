"""Matrix chain EINSUM('ij,jk,kl->il', A, B, C) at 4096x64, 64x4096, 4096x64: trdb against numpy.

The order matters 64x: (A B) C builds a 4096x4096 intermediate, A (B C) a 64x64 one. trdb chooses
the order from its cost model; the peers are numpy.einsum(optimize=True), numpy's left-to-right
product, and trdb forced left to right (nested EINSUMs). trdb's chosen order and numpy's einsum
take turns (the machines here drift between fast and slow spells over seconds: timed one after the
other, either could land in a slow one). Every result is checked against numpy.

    python benchmarks/einsum_chain.py [--n 4096] [--m 64] [--tiles 4096,1024] [--repeats 30] [--workers 1,2] [--tiled]

Operands this small and dense run as one EINSUM call on whole arrays (each operand kept as one
array beside its tiles; with tiles of 4096 an operand is its one tile), then cut into the result's
tiles: EXPLAIN shows DenseEinsumExec. `--tiled` sets dense_einsum_bytes = 0, so that the products
are split over tuples (joins, a SUM) as for larger operands, which costs per-tuple work on top.
"""
from __future__ import annotations

import argparse

import numpy as np
import threadpoolctl

import trdb
from timing import (
    SETTLE_SECONDS,
    WARM_SECONDS,
    alternating_runs,
    best_of,
    check,
    paired_interval,
    paired_ratio,
    product_bound,
    warmed,
)

CHOSEN = "SELECT * FROM EINSUM('ij,jk,kl->il', A, B, C)"
LEFT_TO_RIGHT = "SELECT * FROM EINSUM('ik,kl->il', EINSUM('ij,jk->ik', A, B), C)"


def time_trdb(A, B, C, t: int, workers: str, numpy_opt, args, expected, bound) -> dict[str, float]:
    """trdb's chosen order, taking turns with numpy's optimized einsum, and trdb left to right, with the
    operands stored in tiles of t along n."""
    m = A.shape[1]
    con = trdb.connect()
    cur = con.cursor()
    cur.execute(f"CREATE TENSOR A FROM ? TILE ({t}, {m})", [A])
    cur.execute(f"CREATE TENSOR B FROM ? TILE ({m}, {t})", [B])
    cur.execute(f"CREATE TENSOR C FROM ? TILE ({t}, {m})", [C])
    cur.execute(f"SET workers = {workers}")
    if args.tiled:
        cur.execute("SET dense_einsum_bytes = 0")
    chosen = lambda: cur.execute(CHOSEN).fetch_tensor()  # noqa: E731
    runs = {"numpy": numpy_opt, "chosen": chosen}
    # runs of about a millisecond: in a loop, each timed run follows WARM_SECONDS of untimed runs of its own
    # system; after idle, one untimed run (the pause leaves both slow for a few runs: timing.WARM_SECONDS).
    # A statement here carries no work to the next.
    paired = alternating_runs(args.repeats, runs, before={name: warmed(run) for name, run in runs.items()})
    idle = alternating_runs(args.repeats, runs, before=runs)
    forced, result = best_of(3, lambda: cur.execute(LEFT_TO_RIGHT).fetch_tensor())
    check("trdb left to right", result, expected, bound)
    check("trdb chosen order", paired["chosen"][1], expected, bound)
    con.close()
    (chosen, _), (numpy_times, _) = paired["chosen"], paired["numpy"]
    (idle_chosen, _), (idle_numpy, _) = idle["chosen"], idle["numpy"]
    return {"numpy": min(numpy_times), "chosen": min(chosen), "forced": forced,
            "median": paired_ratio(chosen, numpy_times)[1], "idle numpy": min(idle_numpy),
            "idle chosen": min(idle_chosen), "idle median": paired_ratio(idle_chosen, idle_numpy)[1],
            "intervals": [paired_interval(chosen, numpy_times), paired_interval(idle_chosen, idle_numpy)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--m", type=int, default=64)
    parser.add_argument("--tiles", default="4096,1024",
                        help="tiles of the long axes to store the operands with, one run each (the short axes are whole)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--tiled", action="store_true", help="no EINSUM on whole arrays: joins and sums of tiles")
    args = parser.parse_args()
    n, m = args.n, args.m
    for info in threadpoolctl.threadpool_info():
        print(f"# {info['internal_api']} {info.get('version')} threads={info['num_threads']}")
    rng = np.random.default_rng(0)
    A, B, C = (rng.standard_normal(s, dtype=np.float32) for s in [(n, m), (m, n), (n, m)])
    expected = A.astype(np.float64) @ (B.astype(np.float64) @ C.astype(np.float64))
    # either order's float32 error: the bound of its first product carried through the second, plus the second's
    bound = np.maximum(product_bound(A, B) @ np.abs(C) + product_bound(A @ B, C),
                       np.abs(A) @ product_bound(B, C) + product_bound(A, B @ C))
    numpy_opt = lambda: np.einsum("ij,jk,kl->il", A, B, C, optimize=True)  # noqa: E731
    check("numpy einsum optimize=True", numpy_opt(), expected, bound)
    numpy_forced, result = best_of(3, lambda: (A @ B) @ C)
    check("numpy (A @ B) @ C", result, expected, bound)
    print(f"# A {n}x{m}, B {m}x{n}, C {n}x{m}, float32; tiles t x {m} / {m} x t")
    print(f"# trdb's chosen order and numpy.einsum(optimize=True) take turns, best of {args.repeats} each, twice: "
          f"'loop', each timed run after {WARM_SECONDS * 1000:.0f} ms of untimed runs of its own system (as in a "
          "loop), and 'after idle', after one untimed run;")
    print(f"# left to right (numpy (A @ B) @ C: {numpy_forced:.4f} s) best of 3; trdb/numpy is the ratio of the "
          "best times, 'median' the median ratio of the runs made in the same turn")
    print("# warm: buffer pool (A, B, C tiles, and each as one array where trdb runs the EINSUM on whole arrays), "
          "plan cache; a statement here carries no work to the next; "
          f"each timed run follows a {SETTLE_SECONDS} s pause (BLAS threads asleep)")
    print(f"{'':14}{'---------------- loop ----------------':>41} {'---------- after idle ----------':>34}")
    print(f"{'tile':>5} {'workers':>7} {'numpy opt s':>12} {'trdb s':>9} {'trdb/numpy':>11} {'median':>7} "
          f"{'numpy s':>9} {'trdb s':>9} {'ratio':>6} {'median':>7} {'l-to-r s':>9} {'l-to-r/trdb':>12}")
    for t in (int(x) for x in args.tiles.split(",")):
        for workers in args.workers.split(","):
            times = time_trdb(A, B, C, t, workers, numpy_opt, args, expected, bound)
            print(f"{t:>5} {workers:>7} {times['numpy']:12.5f} {times['chosen']:9.5f} "
                  f"{times['chosen'] / times['numpy']:11.2f} {times['median']:7.2f} {times['idle numpy']:9.5f} "
                  f"{times['idle chosen']:9.5f} {times['idle chosen'] / times['idle numpy']:6.2f} "
                  f"{times['idle median']:7.2f} {times['forced']:9.4f} "
                  f"{times['forced'] / times['chosen']:12.1f}")
            print(f"{'':14}# the medians' intervals (timing.median_interval): loop {times['intervals'][0]}, "
                  f"after idle {times['intervals'][1]}")


if __name__ == "__main__":
    main()
