"""Dense float32 matmul at n = 2048 and 4096: trdb's SQL form (workers = 1, 2) against numpy's A @ B.

Also times two per-tile plans written by hand over the same tiles, so the engine's own overhead shows:
a Python loop of BLAS calls (BLAS's own threads), and the same loop split over two threads by output
tile with one BLAS thread each, as trdb's two workers run it (the lower bound for that plan; its
ratio to numpy says how close to numpy any tiled execution with these tiles can come). Every result is checked
against numpy. Prints one row per size with the ratios to numpy (< 1 is faster than numpy).

    python benchmarks/parallel_matmul.py [--sizes 2048,4096] [--tiles 0,1024] [--repeats 5]

Tile 0 leaves TILE out, so A and B get the tile trdb chooses at the default workers (2048 x 2048 for
these sizes; the per-tile plans use that tile too); one row per size and tile.
"""
from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import threadpoolctl

import trdb
from timing import SETTLE_SECONDS, alternating_runs, best_of, check, paired_ratio, product_bound

QUERY = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"


def per_tile(A: np.ndarray, B: np.ndarray, t: int) -> np.ndarray:
    n = A.shape[0]
    C = np.zeros((n, n), np.float32)
    for i in range(0, n, t):
        for j in range(0, n, t):
            for k in range(0, n, t):
                C[i:i + t, j:j + t] += A[i:i + t, k:k + t] @ B[k:k + t, j:j + t]
    return C


def per_tile_threads(A: np.ndarray, B: np.ndarray, t: int, threads: int = 2) -> np.ndarray:
    """The per-tile loop with its output tiles dealt round-robin to `threads` threads, one BLAS thread each."""
    n = A.shape[0]
    C = np.empty((n, n), np.float32)
    cells = [(i, j) for i in range(0, n, t) for j in range(0, n, t)]

    def run(share: list) -> None:
        for i, j in share:
            acc = A[i:i + t, 0:t] @ B[0:t, j:j + t]
            for k in range(t, n, t):
                acc += A[i:i + t, k:k + t] @ B[k:k + t, j:j + t]
            C[i:i + t, j:j + t] = acc
    with threadpoolctl.threadpool_limits(1), ThreadPoolExecutor(threads) as pool:
        list(pool.map(run, [cells[w::threads] for w in range(threads)]))
    return C


def _stored_tile(cur, name: str) -> int:
    """The tile trdb chose for a square matrix stored without TILE."""
    tile = next(row[3] for row in cur.execute("SHOW TENSORS").fetchall() if row[0] == name)
    rows, cols = (int(x) for x in tile.strip("[]").split(","))
    if rows != cols:
        raise SystemExit(f"{name}: the chosen tile {tile} is not square; pass --tile")
    return rows


def run_size(n: int, t: int, repeats: int) -> list[str]:
    rng = np.random.default_rng(n)
    A, B = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    con = trdb.connect()
    cur = con.cursor()
    tile = f" TILE ({t}, {t})" if t else ""  # left out: the tile trdb chooses (at the default workers)
    cur.execute(f"CREATE TENSOR A FROM ?{tile}", [A])
    cur.execute(f"CREATE TENSOR B FROM ?{tile}", [B])
    t = t or _stored_tile(cur, "A")
    numpy_s, got = best_of(repeats, lambda: A @ B)
    expected, bound = A.astype(np.float64) @ B.astype(np.float64), product_bound(A, B)
    check("numpy", got, expected, bound)
    tile_s, tiled = best_of(repeats, lambda: per_tile(A, B, t))
    check("per-tile", tiled, expected, bound)
    threads_s, tiled = best_of(repeats, lambda: per_tile_threads(A, B, t))
    check("per-tile, 2 threads", tiled, expected, bound)
    row = [f"{n:>5}", f"{t:>5}", f"{numpy_s:8.3f}", f"{tile_s:8.3f}", f"{threads_s:8.3f}"]
    ratios = [f"{tile_s / numpy_s:9.2f}", f"{threads_s / numpy_s:9.2f}"]
    for workers in (1, 2):
        cur.execute(f"SET workers = {workers}")
        # numpy and trdb take turns, so that a busy spell of the machine falls on both
        paired = alternating_runs(repeats, {"numpy": lambda: A @ B,
                                            "trdb": lambda: cur.execute(QUERY).fetch_tensor()})
        check(f"trdb workers={workers}", paired["trdb"][1], expected, bound)
        (trdb_times, _), (numpy_times, _) = paired["trdb"], paired["numpy"]
        row.append(f"{min(trdb_times):8.3f}")
        ratios.append(f"{min(trdb_times) / min(numpy_times):5.2f}/{paired_ratio(trdb_times, numpy_times)[1]:4.2f}")
    # fresh: A and B written before each run (new data versions: whole arrays, where the product runs on them,
    # are built again from the tiles)
    rewrite = lambda: [cur.execute(f"UPDATE {m} SET v = {m}.v * 1") for m in ("A", "B")]  # noqa: E731
    fresh = alternating_runs(repeats, {"numpy": lambda: A @ B, "trdb": lambda: cur.execute(QUERY).fetch_tensor()},
                             before={"trdb": rewrite})
    check("trdb after a write", fresh["trdb"][1], expected, bound)
    ratios.append(f"{min(fresh['trdb'][0]) / min(fresh['numpy'][0]):9.2f}")
    con.close()
    return row + ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2048,4096")
    parser.add_argument("--tiles", default="0,1024", help="tiles to store A and B in (0: TILE left out)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for info in threadpoolctl.threadpool_info():
        print(f"# {info['internal_api']} {info.get('version')} {info.get('architecture')} "
              f"threads={info['num_threads']}")
    print("# tile: as stored; the rows of --tiles 0 show the tile trdb chose; "
          f"seconds are the best of {args.repeats} runs after a warm-up; "
          "trdb includes fetch_tensor(); each trdb/numpy ratio is from runs taking turns with numpy; "
          "warm: buffer pool (A and B tiles, and each as one array where the product runs on whole arrays), "
          "plan cache; fresh/np: workers 2, a write to A and B (untimed) before each run, so whole arrays are "
          "built again; "
          f"a {SETTLE_SECONDS} s pause before each timed run lets the previous run's BLAS threads sleep")
    print("# w1/numpy, w2/numpy: ratio of the best times / median ratio of the runs made in the same turn")
    print("# pertile: the hand-written loop on BLAS's threads; 2thr: that loop on 2 threads of one BLAS thread each")
    print("    n  tile    numpy  pertile     2thr  trdb(w1) trdb(w2)  tile/np   2thr/np   w1/numpy   w2/numpy  fresh/np")
    for n in [int(s) for s in args.sizes.split(",")]:
        for tile in [int(t) for t in args.tiles.split(",")]:
            print(" ".join(run_size(n, tile, args.repeats)))


if __name__ == "__main__":
    main()
