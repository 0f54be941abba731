"""Loading sparse COO data from Parquet: trdb's CREATE TENSOR ... FROM COO against scipy.sparse CSR.

Case `graph` (benchmark c): a random power-law graph, 1 million edges over 100,000 nodes,
as (src, dst, weight) in Parquet. Case `10m`: 10 million uniformly random entries of a 10,000 x
10,000 matrix. trdb runs `CREATE TENSOR G FROM COO 'file' (src, dst, weight) SHAPE (n, n) TILE (t, t)`
(DuckDB reads, validates and sorts; numpy sums duplicates and builds each tile's CSR arrays, or its
dense array where a tile is more than CSR_MAX_DENSITY full); the peer reads the same file with
pyarrow and builds `scipy.sparse.coo_matrix((data, (row, col))).tocsr()`. Both sum duplicate edges.
The result (tuples = non-empty tiles, every value) is checked against scipy before the times are
printed.

The graph's tiles are CSR, so the load costs what the non-zeros weigh whatever the tile size; the
default TILE (25000, 25000) is the one benchmarks/graph_propagation.py found fastest for A @ X. The
`10m` case uses 1000 x 1000 tiles, 10% full: CSR as well.

    python benchmarks/load_graph.py                       # both cases
    python benchmarks/load_graph.py --cases graph --tile 12500 --repeats 5
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


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="graph,10m", help="comma-separated: graph, 10m; default both")
    parser.add_argument("--nodes", type=int, default=100_000, help="graph nodes; default 100000")
    parser.add_argument("--edges", type=int, default=1_000_000, help="graph edges; default 1000000")
    parser.add_argument("--alpha", type=float, default=0.8,
                        help="node weights (rank+1)^-alpha, so degrees follow a power law; default 0.8")
    parser.add_argument("--tile", type=int, default=25_000, help="graph tile size t (TILE (t, t)); default 25000")
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


def load_scipy(path: str, n: int) -> scipy.sparse.csr_matrix:
    table = pq.read_table(path)
    data = table.column("weight").to_numpy()
    rows, cols = table.column("src").to_numpy(), table.column("dst").to_numpy()
    return scipy.sparse.coo_matrix((data, (rows, cols)), shape=(n, n)).tocsr()


def load_trdb(path: str, n: int, tile: int) -> trdb.Connection:
    con = trdb.connect()
    con.execute(f"CREATE TENSOR G FROM COO '{path}' (src, dst, weight) SHAPE ({n}, {n}) TILE ({tile}, {tile})")
    return con


def check(con: trdb.Connection, reference: scipy.sparse.csr_matrix, n: int, tile: int) -> tuple[int, int]:
    """Tuples = non-empty tiles of the reference, every value equal (through fetch_sparse, never dense).
    Returns (tuples, CSR tuples) stored."""
    cur = con.cursor()
    reference.eliminate_zeros()
    rows, cols = reference.nonzero()
    expected = len(np.unique((rows // tile) * math.ceil(n / tile) + cols // tile))
    value = [row for row in cur.execute("DESCRIBE G").fetchall() if row[2] == "value"][0]
    stored, csr = value[5], value[7]  # catalog statistics
    assert stored == expected, f"trdb stored {stored} tiles, the reference has {expected} non-empty tiles"
    got = cur.execute("SELECT * FROM G").fetch_sparse()
    assert got.nnz == reference.nnz and abs(got - reference).max() <= 1e-6 * abs(reference).max(), "values differ"
    return stored, csr


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
    stored, csr = check(con, reference, n, tile)
    con.close()
    print(f"  {'scipy coo -> csr (pyarrow read)':<34} {scipy_s:8.3f} s   nnz {reference.nnz:,}")
    print(f"  {'trdb CREATE TENSOR ... FROM COO':<34} {trdb_s:8.3f} s   tiles {stored:,} ({csr:,} CSR)")
    print(f"  trdb / scipy: {trdb_s / scipy_s:.1f}x   ({table.num_rows / trdb_s / 1e6:.2f} M entries/s in trdb)\n")


def main() -> None:
    args = arguments()
    print(f"{os.cpu_count()} CPU cores; best of {args.repeats} runs; trdb time includes DuckDB's Parquet read, "
          "scipy's includes pyarrow's\n")
    with tempfile.TemporaryDirectory() as folder:
        for case in [c.strip() for c in args.cases.split(",") if c.strip()]:
            if case == "graph":
                table = power_law_graph(args.nodes, args.edges, args.alpha, args.seed)
                run_case("graph", table, args.nodes, args.tile, args.repeats, folder)
            elif case == "10m":
                run_case("10m", uniform_entries(10_000, 10_000_000, args.seed), 10_000, 1000, args.repeats, folder)
            else:
                raise SystemExit(f"unknown case {case!r}: use graph or 10m")


if __name__ == "__main__":
    main()
