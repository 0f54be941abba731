"""Graph propagation A @ X (issue 4, benchmark b): trdb's tiled join against scipy.sparse CSR.

A is a random power-law graph (benchmarks/load_graph.py's `power_law_graph`: 1 million weighted
edges over 100,000 nodes, duplicates summed), X a dense 100,000 x 64 float32 feature matrix. The
peer is `csr @ X` with A as scipy CSR (float32). trdb loads A with
`CREATE TENSOR A FROM COO ? (src, dst, weight) SHAPE (n, n) TILE (t, t)` and X with
`CREATE TENSOR X FROM ? TILE (t, 64)`, then runs

    SELECT A.i, X.j, SUM(MATMUL(A.v, X.v)) AS v FROM A JOIN X ON A.j = X.i GROUP BY A.i, X.j

plus `fetch_tensor()`, with `SET workers = 1` and `2`, checked against scipy.

Tiles are stored dense (the only tile format so far), so every non-empty t x t tile costs t^2 floats
however few edges it holds. For this graph almost every tile is non-empty from t = 4 up: the
tuple count barely falls while the bytes grow with t^2, and from t = 128 the dense tiles weigh
28-42 GB, more than this machine has. The script prints that table first and only creates the
tile sizes whose dense tiles fit (`--budget-gb`, and a quarter of the available memory, since the
tiles live in DuckDB, in the buffer pool and in flight). It also times a Python loop of scipy CSR
products over 4096 x 4096 CSR tiles: what a CSR tile format could approach (625 tuples instead of
~900,000).

    python benchmarks/graph_propagation.py [--tiles 8,16,32,256,1024,4096] [--budget-gb 4]
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse
import threadpoolctl

sys.path.insert(0, str(Path(__file__).parent))
from load_graph import dense_tile_bytes, power_law_graph  # noqa: E402

import trdb  # noqa: E402

from timing import best_of

QUERY = "SELECT A.i, X.j, SUM(MATMUL(A.v, X.v)) AS v FROM A JOIN X ON A.j = X.i GROUP BY A.i, X.j"


def available_bytes() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def check(name: str, result: np.ndarray, expected: np.ndarray) -> None:
    error = float(np.abs(result - expected).max())
    bound = 1e-4 * float(np.abs(expected).max())
    if error > bound:
        raise SystemExit(f"{name}: wrong result (max abs error {error:.3g} > {bound:.3g})")


def csr_tiles(csr: scipy.sparse.csr_matrix, t: int) -> list[tuple[int, int, scipy.sparse.csr_matrix]]:
    """The non-empty t x t tiles of csr as (row block, column block, CSR tile)."""
    n = csr.shape[0]
    tiles = []
    for r in range(0, n, t):
        strip = csr[r:r + t].tocsc()
        for c in range(0, n, t):
            tile = strip[:, c:c + t].tocsr()
            if tile.nnz:
                tiles.append((r // t, c // t, tile))
    return tiles


def csr_tile_loop(tiles, X: np.ndarray, t: int) -> np.ndarray:
    out = np.zeros((X.shape[0], X.shape[1]), X.dtype)
    for r, c, tile in tiles:
        out[r * t:r * t + tile.shape[0]] += tile @ X[c * t:c * t + tile.shape[1]]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--alpha", type=float, default=0.8)
    parser.add_argument("--tiles", default="8,16,32,256,1024,4096", help="tile sizes t of A to try")
    parser.add_argument("--budget-gb", type=float, default=4.0, help="largest dense-tile weight of A to create")
    parser.add_argument("--repeats", type=int, default=3, help="scipy runs (best kept); default 3")
    parser.add_argument("--trdb-repeats", type=int, default=1,
                        help="trdb runs after the EXPLAIN ANALYZE warm-up (best kept); default 1")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    n, f = args.nodes, args.features

    for info in threadpoolctl.threadpool_info():
        print(f"# {info['internal_api']} {info.get('version')} {info.get('architecture')} threads={info['num_threads']}")
    print(f"# {os.cpu_count()} CPU cores, {available_bytes() / 1e9:.1f} GB available memory")

    graph = power_law_graph(n, args.edges, args.alpha, args.seed)
    src, dst = graph.column("src").to_numpy(), graph.column("dst").to_numpy()
    weight = graph.column("weight").to_numpy()
    csr = scipy.sparse.coo_matrix((weight, (src, dst)), shape=(n, n), dtype=np.float32).tocsr()
    csr.sum_duplicates()
    X = np.random.default_rng(args.seed + 1).standard_normal((n, f), np.float32)
    print(f"# graph: {n:,} nodes, {args.edges:,} edges, {csr.nnz:,} distinct non-zeros; X {n:,} x {f} float32\n")

    scipy_s, expected = best_of(args.repeats, lambda: csr @ X)
    expected = np.asarray(expected)
    reference = (csr.astype(np.float64) @ X.astype(np.float64)).astype(np.float32)
    check("scipy", expected, reference)

    tiles = [int(s) for s in args.tiles.split(",") if s.strip()]
    print(f"{'tile':>6} {'non-empty tiles':>16} {'dense GB':>9} {'flops (dense tiles)':>20}  fits?")
    plans: dict[int, tuple[int, int]] = {}
    limit = min(args.budget_gb * 1e9, available_bytes() / 4)
    for t in tiles:
        count, size = dense_tile_bytes(graph, n, t)
        fits = size <= limit
        plans[t] = (count, size) if fits else None
        print(f"{t:>6} {count:>16,} {size / 1e9:>9.2f} {2 * count * t * t * f / 1e9:>17.1f} G  "
              f"{'yes' if fits else f'no (> {limit / 1e9:.1f} GB): not created'}")
    print(f"  (scipy CSR does {2 * csr.nnz * f / 1e9:.2f} GFLOP)\n")

    results: list[tuple[str, float, str]] = [("scipy CSR @ X", scipy_s, "")]
    best: tuple[float, int, int, str] | None = None
    for t in tiles:
        if plans[t] is None:
            continue
        con = trdb.connect()
        cur = con.cursor()
        started = time.perf_counter()
        cur.execute(f"CREATE TENSOR A FROM COO ? (src, dst, weight) SHAPE ({n}, {n}) TILE ({t}, {t})", [graph])
        load_s = time.perf_counter() - started
        cur.execute(f"CREATE TENSOR X FROM ? TILE ({t}, {f})", [X])
        stored = cur.execute("SELECT COUNT(*) FROM A").fetchone()[0]
        assert stored == plans[t][0], f"A stored {stored} tuples, expected {plans[t][0]} non-empty tiles"
        density = [row for row in cur.execute("SHOW TENSORS").fetchall() if row[0] == "A"][0][6]
        note = f"A: {stored:,} tuples, {plans[t][1] / 1e9:.2f} GB dense, density {density}, FROM COO {load_s:.1f} s"
        print(f"TILE ({t}, {t}): {note}", flush=True)
        plans_text: dict[int, str] = {}
        for workers in (1, 2):
            cur.execute(f"SET workers = {workers}")
            # EXPLAIN ANALYZE runs the query once: it is the warm-up (buffer pool) and shows where time goes
            plans_text[workers] = "\n".join(row[0] for row in cur.execute("EXPLAIN ANALYZE " + QUERY).fetchall())
            seconds, got = best_of(args.trdb_repeats, lambda: cur.execute(QUERY).fetch_tensor(shape=(n, f)),
                                   warmup=False)
            check(f"trdb t={t} workers={workers}", got, reference)
            results.append((f"trdb TILE ({t}, {t}) workers={workers}", seconds, ""))
            print(f"  workers={workers}: {seconds:.2f} s", flush=True)
            if best is None or seconds < best[0]:
                best = (seconds, t, workers, plans_text[workers])
        con.close()

    if best is not None:
        print(f"\nEXPLAIN ANALYZE, TILE ({best[1]}, {best[1]}), workers = {best[2]}:\n{best[3]}")

    big = 4096
    tiles_csr = csr_tiles(csr, big)
    loop_s, got = best_of(args.repeats, lambda: csr_tile_loop(tiles_csr, X, big))
    check("CSR-tile loop", got, reference)
    results.append((f"Python loop over {len(tiles_csr)} CSR tiles {big}x{big}", loop_s,
                    "what CSR tiles could approach"))

    print(f"\n{'system':<44} {'seconds':>9} {'x / scipy':>10}")
    for name, seconds, note in results:
        print(f"{name:<44} {seconds:9.3f} {seconds / scipy_s:10.1f}  {note}")
    if best is not None:
        print(f"\nfastest trdb: TILE ({best[1]}, {best[1]}), workers = {best[2]}: {best[0]:.2f} s = "
              f"{best[0] / scipy_s:.0f}x scipy CSR (issue 4 wants <= 1.5x)")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.1f} GB")


if __name__ == "__main__":
    main()
