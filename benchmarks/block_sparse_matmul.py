"""Block-sparse matmul (benchmark a): trdb's tiled join against dense numpy and scipy BSR.

A is n x n (default 8192) in 256 x 256 blocks, 2% of the blocks non-zero at random positions with
dense random values inside them; B is a dense n x 1024 float32 matrix. Compared in one run:

- numpy: the dense product `A @ B` (A held as a dense array, zeros and all);
- scipy BSR: `scipy.sparse.bsr_matrix(A, blocksize=(256, 256)) @ B` (conversion not timed);
- per-block loop: a Python loop of BLAS calls over the non-zero blocks (the lower bound any tiled
  execution can reach; the background notes report it ~30x faster than numpy and BSR);
- trdb: `SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j`
  plus `fetch_tensor()`, for a few tilings of B's columns and for `SET workers = 1` and `2`.

Only A's non-zero blocks are stored (absent tiles are zeros), so the join pairs only those with B.
Times are the best of `--repeats` runs after a warm-up; every result is checked against numpy
(float64 reference). The target: trdb at least 10x faster than numpy and than BSR (goal
20x); the ratios printed are peer time / trdb time (> 1: trdb is faster).

    python benchmarks/block_sparse_matmul.py [--n 8192] [--block 256] [--density 0.02] [--cols 1024]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import scipy.sparse
import threadpoolctl

import trdb
from timing import best_of, check

QUERY = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"


def block_sparse(n: int, block: int, density: float, seed: int) -> tuple[np.ndarray, list[tuple[int, int]]]:
    rng = np.random.default_rng(seed)
    grid = n // block
    count = max(1, round(density * grid * grid))
    picks = rng.choice(grid * grid, size=count, replace=False)
    A = np.zeros((n, n), np.float32)
    blocks = sorted((int(p // grid), int(p % grid)) for p in picks)
    for r, c in blocks:
        A[r * block:(r + 1) * block, c * block:(c + 1) * block] = rng.standard_normal((block, block), np.float32)
    return A, blocks


def per_block(A: np.ndarray, B: np.ndarray, blocks: list[tuple[int, int]], block: int) -> np.ndarray:
    C = np.zeros((A.shape[0], B.shape[1]), np.float32)
    for r, c in blocks:
        C[r * block:(r + 1) * block] += A[r * block:(r + 1) * block, c * block:(c + 1) * block] @ B[c * block:(c + 1) * block]
    return C


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--density", type=float, default=0.02, help="fraction of non-zero blocks; default 0.02")
    parser.add_argument("--cols", type=int, default=1024, help="columns of the dense B; default 1024")
    parser.add_argument("--b-tiles", default="1024,512,256",
                        help="column tile sizes of B to try (rows of B's tiles are --block); default 1024,512,256")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    n, t = args.n, args.block

    A, blocks = block_sparse(n, t, args.density, args.seed)
    B = np.random.default_rng(args.seed + 1).standard_normal((n, args.cols), np.float32)
    expected = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)
    for info in threadpoolctl.threadpool_info():
        print(f"# {info['internal_api']} {info.get('version')} {info.get('architecture')} threads={info['num_threads']}")
    blas_env = {k: v for k, v in os.environ.items() if k.startswith("OPENBLAS")}
    print(f"# {os.cpu_count()} CPU cores; OPENBLAS env: {blas_env or 'none'}")
    print(f"# A {n} x {n} float32, {t} x {t} blocks, {len(blocks)} of {(n // t) ** 2} non-zero "
          f"({len(blocks) / (n // t) ** 2:.1%}); B {n} x {args.cols} dense; best of {args.repeats} after a warm-up\n")

    rows: list[tuple[str, float]] = []
    numpy_s, got = best_of(args.repeats, lambda: A @ B)
    check("numpy", got, expected)
    rows.append(("numpy dense A @ B", numpy_s))

    bsr = scipy.sparse.bsr_matrix(A, blocksize=(t, t))
    bsr_s, got = best_of(args.repeats, lambda: bsr @ B)
    check("scipy BSR", np.asarray(got), expected)
    rows.append(("scipy BSR @ B", bsr_s))

    loop_s, got = best_of(args.repeats, lambda: per_block(A, B, blocks, t))
    check("per-block loop", got, expected)
    rows.append(("per-block BLAS loop (Python)", loop_s))

    con = trdb.connect()
    cur = con.cursor()
    load_started = time.perf_counter()
    # from a sparse matrix: only its non-zero blocks become tiles (a dense array's zero blocks are values, stored)
    cur.execute(f"CREATE TENSOR A FROM ? TILE ({t}, {t})", [scipy.sparse.csr_matrix(A)])
    load_a = time.perf_counter() - load_started
    stored = cur.execute("SELECT COUNT(*) FROM A").fetchone()[0]
    assert stored == len(blocks), f"trdb stored {stored} tiles of A, expected {len(blocks)}"
    print(f"# trdb: CREATE TENSOR A FROM ? took {load_a:.2f} s, {stored} tuples stored\n")

    trdb_results: list[tuple[int, int, float]] = []
    for b_cols in [int(s) for s in args.b_tiles.split(",") if s.strip()]:
        cur.execute("DROP TENSOR IF EXISTS B")
        cur.execute(f"CREATE TENSOR B FROM ? TILE ({t}, {b_cols})", [B])
        for workers in (1, 2):
            cur.execute(f"SET workers = {workers}")
            seconds, got = best_of(args.repeats, lambda: cur.execute(QUERY).fetch_tensor(shape=expected.shape))
            check(f"trdb B tile ({t}, {b_cols}) workers={workers}", got, expected)
            trdb_results.append((b_cols, workers, seconds))
            rows.append((f"trdb B TILE ({t}, {b_cols}) workers={workers}", seconds))

    best_cols, best_workers, trdb_s = min(trdb_results, key=lambda r: r[2])
    # where the time goes, for the fastest configuration
    cur.execute("DROP TENSOR IF EXISTS B")
    cur.execute(f"CREATE TENSOR B FROM ? TILE ({t}, {best_cols})", [B])
    cur.execute(f"SET workers = {best_workers}")
    cur.execute(QUERY).fetch_tensor()
    plan = "\n".join(str(r[0]) for r in cur.execute("EXPLAIN ANALYZE " + QUERY).fetchall())
    started = time.perf_counter()
    cur.execute(QUERY)
    query_only = time.perf_counter() - started
    started = time.perf_counter()
    cur.fetch_tensor(shape=expected.shape)
    fetch_only = time.perf_counter() - started
    con.close()

    print(f"{'system':<40} {'seconds':>9} {'numpy/x':>8} {'bsr/x':>8}")
    for name, seconds in rows:
        print(f"{name:<40} {seconds:9.4f} {numpy_s / seconds:8.1f} {bsr_s / seconds:8.1f}")
    print(f"\nfastest trdb: B TILE ({t}, {best_cols}), workers = {best_workers}: {trdb_s:.4f} s "
          f"(query {query_only:.4f} s + fetch_tensor {fetch_only:.4f} s)")
    print(f"numpy / trdb = {numpy_s / trdb_s:.1f}x, bsr / trdb = {bsr_s / trdb_s:.1f}x "
          f"(target: >= 10x both, goal 20x); trdb / per-block loop = {trdb_s / loop_s:.2f}")
    print("\nEXPLAIN ANALYZE of the fastest configuration:\n" + plan)


if __name__ == "__main__":
    main()
