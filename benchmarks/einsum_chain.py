"""Matrix chain EINSUM('ij,jk,kl->il', A, B, C) at 4096x64, 64x4096, 4096x64: trdb against numpy.

The order matters 64x: (A B) C builds a 4096x4096 intermediate, A (B C) a 64x64 one. trdb chooses
the order from its cost model; the peers are numpy.einsum(optimize=True), numpy's left-to-right
product, and trdb forced left to right (nested EINSUMs). Every result is checked against numpy.

    python benchmarks/einsum_chain.py [--n 4096] [--m 64] [--tiles 4096,1024] [--repeats 30] [--workers 1,2]

With tiles of 4096 each operand is one tuple and trdb runs numpy's two products; with 1024 the
products are split over tuples (joins, a SUM), which costs per-tuple work on top.
"""
from __future__ import annotations

import argparse

import numpy as np
import threadpoolctl

import trdb

from timing import best_of, check

CHOSEN = "SELECT * FROM EINSUM('ij,jk,kl->il', A, B, C)"
LEFT_TO_RIGHT = "SELECT * FROM EINSUM('ik,kl->il', EINSUM('ij,jk->ik', A, B), C)"


def time_trdb(A, B, C, t: int, args, expected) -> dict[str, float]:
    """trdb's chosen and left-to-right orders with the operands stored in tiles of t along n."""
    m = A.shape[1]
    times = {}
    con = trdb.connect()
    cur = con.cursor()
    cur.execute(f"CREATE TENSOR A FROM ? TILE ({t}, {m})", [A])
    cur.execute(f"CREATE TENSOR B FROM ? TILE ({m}, {t})", [B])
    cur.execute(f"CREATE TENSOR C FROM ? TILE ({t}, {m})", [C])
    for workers in args.workers.split(","):
        cur.execute(f"SET workers = {workers}")
        for label, query in [("chosen order", CHOSEN), ("left to right", LEFT_TO_RIGHT)]:
            name = f"trdb tile {t}, {label}, workers={workers}"
            times[name], result = best_of(args.repeats, lambda: cur.execute(query).fetch_tensor())
            check(name, result, expected)
    con.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--m", type=int, default=64)
    parser.add_argument("--tiles", default="4096,1024",
                        help="tiles of the long axes to store the operands with, one run each (the short axes are whole)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--workers", default="1,2")
    args = parser.parse_args()
    n, m = args.n, args.m
    for info in threadpoolctl.threadpool_info():
        print(f"# {info['internal_api']} {info.get('version')} threads={info['num_threads']}")
    rng = np.random.default_rng(0)
    A, B, C = (rng.standard_normal(s, dtype=np.float32) for s in [(n, m), (m, n), (n, m)])
    expected = A.astype(np.float64) @ (B.astype(np.float64) @ C.astype(np.float64))
    peers = {
        "numpy einsum optimize=True": lambda: np.einsum("ij,jk,kl->il", A, B, C, optimize=True),
        "numpy (A @ B) @ C": lambda: (A @ B) @ C,
    }
    times = {}
    for name, run in peers.items():
        times[name], result = best_of(args.repeats, run)
        check(name, result, expected)
    for t in (int(x) for x in args.tiles.split(",")):
        times.update(time_trdb(A, B, C, t, args, expected))
    base = times["numpy einsum optimize=True"]
    print(f"# A {n}x{m}, B {m}x{n}, C {n}x{m}, float32; tiles t x {m} / {m} x t; best of {args.repeats}")
    print(f"{'run':<46} {'seconds':>9} {'/ numpy opt':>12}")
    for name, seconds in times.items():
        print(f"{name:<46} {seconds:9.4f} {seconds / base:12.2f}")
    for t in args.tiles.split(","):
        for workers in args.workers.split(","):
            chosen = times[f"trdb tile {t}, chosen order, workers={workers}"]
            forced = times[f"trdb tile {t}, left to right, workers={workers}"]
            print(f"# tile {t}, workers={workers}: left to right / chosen = {forced / chosen:.1f}x")


if __name__ == "__main__":
    main()
