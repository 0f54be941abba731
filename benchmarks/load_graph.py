"""Loading sparse COO data from Parquet: trdb's CREATE TENSOR ... FROM COO against scipy.sparse CSR.

Case `graph`: a random power-law graph, 1 million edges over 100,000 nodes, as (src, dst, weight) in
Parquet. Case `10m`: 10 million uniformly random entries of a 10,000 x 10,000 matrix. trdb runs
`CREATE TENSOR G FROM COO 'file' (src, dst, weight) SHAPE (n, n) TILE (t, t)` (DuckDB reads and sorts,
numpy scatters the dense tiles); the peer reads the same file with pyarrow and builds
`scipy.sparse.coo_matrix((data, (row, col))).tocsr()`. Both sum duplicate edges. The result is checked
against scipy before the times are printed.

Tiles are dense (the only tile format so far), so the load costs what the dense tiles weigh. For this
graph 4096 x 4096 tiles are all non-empty and would weigh 42 GB (the whole 100,000^2 matrix); the
count of non-empty tiles barely falls from t = 4 to t = 16 while their bytes grow 16x. `--tile auto`
therefore takes the largest power of two whose dense tiles fit in `--budget-gb` (default 0.25 GB, about
one write chunk: t = 8 for the default graph) and prints the table it chose from. Sparse (CSR) tiles,
when they exist, make large tiles the right choice again.

    python benchmarks/load_graph.py                       # both cases, tile auto
    python benchmarks/load_graph.py --cases graph --tile 16 --repeats 5
"""
from __future__ import annotations

import argparse
import math
import os
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse

import trdb

from timing import best_of

CANDIDATE_TILES = (4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="graph,10m", help="comma-separated: graph, 10m; default both")
    parser.add_argument("--nodes", type=int, default=100_000, help="graph nodes; default 100000")
    parser.add_argument("--edges", type=int, default=1_000_000, help="graph edges; default 1000000")
    parser.add_argument("--alpha", type=float, default=0.8,
                        help="node weights (rank+1)^-alpha, so degrees follow a power law; default 0.8")
    parser.add_argument("--tile", default="auto", help="graph tile size t (TILE (t, t)) or 'auto'; default auto")
    parser.add_argument("--budget-gb", type=float, default=0.25,
                        help="largest dense-tile size of the graph that --tile auto accepts; default 0.25")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per system (best is kept); default 3")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def power_law_graph(nodes: int, edges: int, alpha: float, seed: int) -> pa.Table:
    """Chung-Lu style: both ends drawn with weight (rank+1)^-alpha, then node ids shuffled (hubs anywhere)."""
    rng = np.random.default_rng(seed)
    weights = np.arange(1, nodes + 1, dtype=np.float64) ** -alpha
    cumulative = np.cumsum(weights / weights.sum())
    ends = np.searchsorted(cumulative, rng.random((2, edges)), side="right").clip(0, nodes - 1)
    relabel = rng.permutation(nodes)
    return pa.table({"src": relabel[ends[0]], "dst": relabel[ends[1]],
                     "weight": rng.uniform(0.5, 1.5, edges).astype(np.float32)})


def uniform_entries(n: int, count: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"src": rng.integers(0, n, count), "dst": rng.integers(0, n, count),
                     "weight": rng.standard_normal(count).astype(np.float32)})


def dense_tile_bytes(table: pa.Table, n: int, tile: int) -> tuple[int, int]:
    """(non-empty tiles, bytes of those tiles stored dense as float32) for TILE (tile, tile)."""
    grid = math.ceil(n / tile)
    ids = (table.column("src").to_numpy() // tile) * grid + table.column("dst").to_numpy() // tile
    tiles = len(np.unique(ids))
    return tiles, tiles * tile * tile * 4


def choose_tile(table: pa.Table, n: int, budget_gb: float) -> int:
    print(f"{'tile':>6} {'non-empty tiles':>16} {'dense bytes':>12}")
    chosen = CANDIDATE_TILES[0]
    for tile in CANDIDATE_TILES:
        tiles, size = dense_tile_bytes(table, n, tile)
        print(f"{tile:>6} {tiles:>16,} {size / 1e9:>10.3f} GB")
        if size <= budget_gb * 1e9:
            chosen = max(chosen, tile)
    print(f"--tile auto: {chosen} (the largest whose dense tiles fit in {budget_gb} GB)\n")
    return chosen


def load_scipy(path: str, n: int) -> scipy.sparse.csr_matrix:
    table = pq.read_table(path)
    data = table.column("weight").to_numpy()
    rows, cols = table.column("src").to_numpy(), table.column("dst").to_numpy()
    return scipy.sparse.coo_matrix((data, (rows, cols)), shape=(n, n)).tocsr()


def load_trdb(path: str, n: int, tile: int) -> trdb.Connection:
    con = trdb.connect()
    con.execute(f"CREATE TENSOR G FROM COO '{path}' (src, dst, weight) SHAPE ({n}, {n}) TILE ({tile}, {tile})")
    return con


def check(con: trdb.Connection, reference: scipy.sparse.csr_matrix, n: int, tile: int, samples: int = 8) -> int:
    """Tuples = non-empty tiles of the reference; sampled tiles equal its blocks. Returns the tuples stored."""
    cur = con.cursor()
    reference.eliminate_zeros()
    rows, cols = reference.nonzero()
    expected = len(np.unique((rows // tile) * math.ceil(n / tile) + cols // tile))
    stored = next(row[5] for row in cur.execute("SHOW TENSORS").fetchall() if row[0] == "G")  # catalog statistics
    assert stored == expected, f"trdb stored {stored} tiles, the reference has {expected} non-empty tiles"
    picks = np.random.default_rng(1).choice(len(rows), size=min(samples, len(rows)), replace=False)
    keys = {(int(r), int(c)) for r, c in zip(rows[picks] // tile, cols[picks] // tile)}
    where = " OR ".join(f"(G.i = {r} AND G.j = {c})" for r, c in keys)  # one scan of G, not one per tile
    for r, c, got in cur.execute(f"SELECT G.i, G.j, G.v FROM G WHERE {where}").fetchall():
        block = reference[r * tile:(r + 1) * tile, c * tile:(c + 1) * tile].toarray()
        np.testing.assert_allclose(got, block, rtol=1e-6, atol=1e-6)
        keys.discard((r, c))
    assert not keys, f"tiles {sorted(keys)} are missing from trdb"
    return stored


def run_case(name: str, table: pa.Table, n: int, tile: int, repeats: int, folder: str) -> None:
    path = os.path.join(folder, f"{name}.parquet")
    pq.write_table(table, path)
    print(f"{name}: {table.num_rows:,} entries, {n:,} x {n:,}, TILE ({tile}, {tile}), "
          f"{os.path.getsize(path) / 1e6:.1f} MB of Parquet")
    scipy_s, reference = best_of(repeats, lambda: load_scipy(path, n), warmup=False)
    connections: list[trdb.Connection] = []

    def trdb_run() -> trdb.Connection:
        while connections:
            connections.pop().close()  # free the previous run's tensor before timing the next
        connections.append(load_trdb(path, n, tile))
        return connections[-1]

    trdb_s, con = best_of(repeats, trdb_run, warmup=False)
    stored = check(con, reference, n, tile)
    con.close()
    print(f"  {'scipy coo -> csr (pyarrow read)':<34} {scipy_s:8.3f} s   nnz {reference.nnz:,}")
    print(f"  {'trdb CREATE TENSOR ... FROM COO':<34} {trdb_s:8.3f} s   tiles {stored:,}")
    print(f"  trdb / scipy: {trdb_s / scipy_s:.1f}x   ({table.num_rows / trdb_s / 1e6:.2f} M entries/s in trdb)\n")


def main() -> None:
    args = arguments()
    print(f"{os.cpu_count()} CPU cores; best of {args.repeats} runs; trdb time includes DuckDB's Parquet read, "
          "scipy's includes pyarrow's\n")
    with tempfile.TemporaryDirectory() as folder:
        for case in [c.strip() for c in args.cases.split(",") if c.strip()]:
            if case == "graph":
                table = power_law_graph(args.nodes, args.edges, args.alpha, args.seed)
                tile = choose_tile(table, args.nodes, args.budget_gb) if args.tile == "auto" else int(args.tile)
                run_case("graph", table, args.nodes, tile, args.repeats, folder)
            elif case == "10m":
                run_case("10m", uniform_entries(10_000, 10_000_000, args.seed), 10_000, 1000, args.repeats, folder)
            else:
                raise SystemExit(f"unknown case {case!r}: use graph or 10m")


if __name__ == "__main__":
    main()
