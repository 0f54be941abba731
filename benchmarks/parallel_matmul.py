"""Dense float32 matmul at n = 2048 and 4096: trdb's SQL form (workers = 1, 2) against numpy's A @ B.

Also times a per-tile plan written by hand (a Python loop of BLAS calls over the same tiles, the
lower bound for any tiled execution) so the engine's own overhead shows. Every result is checked
against numpy. Prints one row per size with the ratios to numpy (< 1 is faster than numpy).

    python benchmarks/parallel_matmul.py [--sizes 2048,4096] [--tile 1024] [--repeats 3]
"""
from __future__ import annotations

import argparse

import numpy as np
import threadpoolctl

import trdb
from timing import best_of, best_of_alternating, check, product_bound

QUERY = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"


def per_tile(A: np.ndarray, B: np.ndarray, t: int) -> np.ndarray:
    n = A.shape[0]
    C = np.zeros((n, n), np.float32)
    for i in range(0, n, t):
        for j in range(0, n, t):
            for k in range(0, n, t):
                C[i:i + t, j:j + t] += A[i:i + t, k:k + t] @ B[k:k + t, j:j + t]
    return C


def run_size(n: int, t: int, repeats: int) -> list[str]:
    rng = np.random.default_rng(n)
    A, B = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    numpy_s, got = best_of(repeats, lambda: A @ B)
    expected, bound = A.astype(np.float64) @ B.astype(np.float64), product_bound(A, B)
    check("numpy", got, expected, bound)
    tile_s, tiled = best_of(repeats, lambda: per_tile(A, B, t))
    check("per-tile", tiled, expected, bound)
    con = trdb.connect()
    cur = con.cursor()
    cur.execute(f"CREATE TENSOR A FROM ? TILE ({t}, {t})", [A])
    cur.execute(f"CREATE TENSOR B FROM ? TILE ({t}, {t})", [B])
    row = [f"{n:>5}", f"{numpy_s:8.3f}", f"{tile_s:8.3f}"]
    ratios = [f"{tile_s / numpy_s:9.2f}"]
    for workers in (1, 2):
        cur.execute(f"SET workers = {workers}")
        # numpy and trdb take turns, so that a busy spell of the machine falls on both
        paired = best_of_alternating(repeats, {"numpy": lambda: A @ B,
                                               "trdb": lambda: cur.execute(QUERY).fetch_tensor()})
        check(f"trdb workers={workers}", paired["trdb"][1], expected, bound)
        row.append(f"{paired['trdb'][0]:8.3f}")
        ratios.append(f"{paired['trdb'][0] / paired['numpy'][0]:9.2f}")
    con.close()
    return row + ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2048,4096")
    parser.add_argument("--tile", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for info in threadpoolctl.threadpool_info():
        print(f"# {info['internal_api']} {info.get('version')} {info.get('architecture')} "
              f"threads={info['num_threads']}")
    print(f"# tile {args.tile}; seconds are the best of {args.repeats} runs after a warm-up; "
          "trdb includes fetch_tensor(); each trdb/numpy ratio is from runs taking turns with numpy; "
          "warm: buffer pool (A and B tiles), plan cache")
    print("    n    numpy  pertile  trdb(w1) trdb(w2)  tile/np  w1/numpy  w2/numpy")
    for n in [int(s) for s in args.sizes.split(",")]:
        print(" ".join(run_size(n, args.tile, args.repeats)))


if __name__ == "__main__":
    main()
