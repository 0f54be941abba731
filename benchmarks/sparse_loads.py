"""Large sparse loads judged by their non-zeros: `FROM ?` of a scipy CSR matrix in huge tiles, and a 40M-entry
`FROM COO` of a 1,000,000^2 matrix in 50,000^2 tiles under memory_limit = '256MB' (issue #54, item 4).

Case `csr`: `CREATE TENSOR A FROM ? TILE (21168, 21168)` of a float32 scipy CSR matrix with 1.34M non-zeros,
for n = 21168 (one tile) and n = 169343 (ogbn-arxiv's node count: an 8 x 8 grid whose dense size is
107 GiB), each with a uniformly random and a banded pattern (every non-zero within 64 of the diagonal,
as a graph with local edges). The peer is scipy building the same CSR matrix from its (row, col, value)
arrays. trdb loads under memory_limit = '256MB' (one dense tile is 1.67 GiB). The result is checked: A·x in
trdb against scipy's A @ x.

Case `coo`: 40M uniformly random (r, c, w) entries in a Parquet file (written a chunk at a time; LANGUAGE.md
documents `FROM COO 'file.parquet'`, and a file keeps the 800 MB of input arrays out of the loading
process), loaded with `CREATE TENSOR E FROM COO 'file' (r, c, w) SHAPE (1000000, 1000000) TILE (50000, 50000)`
under `SET memory_limit = '256MB'`: 400 CSR tiles of about 100,000 entries each. Its peak RSS must stay
under memory_limit + 400 MB. The peer reads the same file with pyarrow and builds the scipy CSR matrix
(coo_matrix((w, (r, c))).tocsr(), duplicates summed as trdb sums them), with no memory limit. The result
is checked: A·x in trdb (same child, same limit) against scipy's.

The csr loads are timed as the best of REPEATS in one child (`CREATE OR REPLACE`), the 40M load once.
Every load runs in a fresh child process (this script with `--child`); peak RSS is the child's VmHWM
(/proc/self/status), `base` what it held before the statement (interpreter, libraries and, for csr, the
input matrix, which the caller holds anyway).

    python benchmarks/sparse_loads.py                          # both cases, full size
    python benchmarks/sparse_loads.py --cases coo --entries 4000000 --n 100000 --tile 5000
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse

MB = 1 << 20
OVERHEAD = 400 * MB   # the allowance over memory_limit
CSR_TILE = 21168
CSR_NNZ = 1_340_000
BAND = 64
REPEATS = 3           # csr loads, each system: the best is kept (the 40M COO load runs once)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="csr,coo", help="comma-separated: csr, coo; default both")
    parser.add_argument("--entries", type=int, default=40_000_000, help="COO entries; default 40M")
    parser.add_argument("--n", type=int, default=1_000_000, help="COO matrix size n (n x n); default 1000000")
    parser.add_argument("--tile", type=int, default=50_000, help="COO tile size t (TILE (t, t)); default 50000")
    parser.add_argument("--limit", default="256MB", help="memory_limit of trdb's loads; default 256MB")
    parser.add_argument("--keep", default=None, help="a folder for the Parquet file (kept); default a temporary one")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return parser.parse_args()


def max_rss() -> int:
    """This process's peak resident memory (VmHWM): getrusage's ru_maxrss starts a child at its parent's peak."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ---- the data ----------------------------------------------------------------------------------------------

def csr_entries(n: int, pattern: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, cols, values) of CSR_NNZ distinct non-zeros of an n x n matrix, random or within BAND of the
    diagonal; values uniform in [0.5, 1.5)."""
    rng = np.random.default_rng(seed)
    if pattern == "random":
        flat = np.unique(rng.integers(0, n * n, int(CSR_NNZ * 1.01)))[:CSR_NNZ]
        rng.shuffle(flat)
        rows, cols = flat // n, flat % n
    else:  # banded: each row's non-zeros near the diagonal (a graph of local edges)
        per_row = -(-CSR_NNZ // n)
        rows = np.repeat(np.arange(n), per_row)[:CSR_NNZ]
        offsets = np.stack([rng.permutation(2 * BAND + 1)[:per_row] - BAND for _ in range(min(n, 4096))])
        cols = np.clip(rows + offsets[rows % len(offsets), np.arange(len(rows)) % per_row], 0, n - 1)
        keep = np.unique(rows * n + cols, return_index=True)[1]
        rows, cols = rows[keep], cols[keep]
    return rows, cols, rng.uniform(0.5, 1.5, len(rows)).astype(np.float32)


def coo_parquet(path: str, n: int, entries: int, seed: int = 7, chunk: int = 1 << 20) -> None:
    """Random (r, c, w) entries of an n x n matrix in Parquet, written a chunk at a time."""
    schema = pa.schema([("r", pa.int64()), ("c", pa.int64()), ("w", pa.float32())])
    with pq.ParquetWriter(path, schema) as writer:
        for number, start in enumerate(range(0, entries, chunk)):
            rng = np.random.default_rng([seed, number])
            size = min(chunk, entries - start)
            writer.write_table(pa.table({"r": rng.integers(0, n, size), "c": rng.integers(0, n, size),
                                         "w": rng.uniform(0.5, 1.5, size).astype(np.float32)}, schema=schema))


def vector(n: int) -> np.ndarray:
    return np.random.default_rng(11).standard_normal((n, 1)).astype(np.float32)


# ---- the children ------------------------------------------------------------------------------------------

def trdb_product(cur, n: int, tile: int) -> np.ndarray:
    """A·x in trdb (x loaded in tiles of (tile, 1))."""
    cur.execute(f"CREATE TENSOR X FROM ? TILE ({tile}, 1)", [vector(n)])
    cur.execute("SELECT A.i, X.j, SUM(MATMUL(A.v, X.v)) AS v FROM A JOIN X ON A.j = X.i GROUP BY A.i, X.j")
    return cur.fetch_tensor((n, 1))


def connected():
    """A cursor on a new database in memory, warmed by one small load (its first statement sets the catalog up)."""
    import trdb
    cur = trdb.connect().cursor()
    cur.execute("CREATE TENSOR warm FROM ? TILE (2, 2)", [scipy.sparse.eye(4, format="csr", dtype=np.float32)])
    cur.execute("DROP TENSOR warm")
    return cur


def best(run, repeats: int = REPEATS) -> float:
    """The best time of `repeats` runs (the first is a run too: each load starts from the same state)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def child(spec: dict) -> dict:
    out = {}
    if spec["case"] == "csr_trdb":
        n = spec["n"]
        rows, cols, values = csr_entries(n, spec["pattern"])
        matrix = scipy.sparse.csr_matrix((values, (rows, cols)), shape=(n, n))
        del rows, cols, values
        cur = connected()
        cur.execute(f"SET memory_limit = '{spec['limit']}'")  # 21168^2 is 1.67 GiB a dense tile: refused here before
        out["base"] = max_rss()
        out["seconds"] = best(lambda: cur.execute(f"CREATE OR REPLACE TENSOR A FROM ? TILE ({CSR_TILE}, {CSR_TILE})",
                                                  [matrix]))
        out["rss"] = max_rss()
        got, want = trdb_product(cur, n, CSR_TILE), matrix.astype(np.float64) @ vector(n).astype(np.float64)
        out["error"] = float(np.abs(got - want).max() / max(1e-30, np.abs(want).max()))
        out["nnz"] = int(matrix.nnz)
    elif spec["case"] == "csr_scipy":
        n = spec["n"]
        rows, cols, values = csr_entries(n, spec["pattern"])
        out["base"] = max_rss()
        out["seconds"] = best(lambda: scipy.sparse.csr_matrix((values, (rows, cols)), shape=(n, n)))
        out["rss"] = max_rss()
    elif spec["case"] == "coo_trdb":
        n, t = spec["n"], spec["tile"]
        cur = connected()
        cur.execute(f"SET memory_limit = '{spec['limit']}'")
        out["base"] = max_rss()
        started = time.perf_counter()
        cur.execute(f"CREATE TENSOR A FROM COO '{spec['path']}' (r, c, w) SHAPE ({n}, {n}) TILE ({t}, {t})")
        out["seconds"], out["rss"] = time.perf_counter() - started, max_rss()
        out["tiles"] = cur.execute("SELECT COUNT(*) FROM A").fetchone()[0]
        np.save(spec["result"], trdb_product(cur, n, t))
        out["rss_with_product"] = max_rss()
    elif spec["case"] == "coo_scipy":
        n = spec["n"]
        out["base"] = max_rss()
        started = time.perf_counter()
        table = pq.read_table(spec["path"])
        matrix = scipy.sparse.coo_matrix((table.column("w").to_numpy(), (table.column("r").to_numpy(),
                                          table.column("c").to_numpy())), shape=(n, n)).tocsr()
        out["seconds"], out["rss"] = time.perf_counter() - started, max_rss()
        del table
        np.save(spec["result"], matrix.astype(np.float64) @ vector(n).astype(np.float64))
    return out


def run_child(spec: dict, timeout: float = 3600) -> dict:
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
                          capture_output=True, text=True, timeout=timeout)
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return {"failed": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:300]}
    return json.loads(lines[-1])


# ---- the parent --------------------------------------------------------------------------------------------

def mib(nbytes: float) -> str:
    return f"{nbytes / MB:,.0f} MiB"


def csr_case(limit: str) -> bool:
    print(f"\n# FROM ? of a scipy CSR matrix, TILE ({CSR_TILE}, {CSR_TILE}), {CSR_NNZ:,} non-zeros, float32, "
          f"memory_limit = '{limit}' (scipy: no limit)")
    print(f"{'n':>8} {'pattern':>8} {'trdb s':>8} {'scipy s':>8} {'ratio':>6} {'trdb peak RSS':>14} "
          f"{'(before)':>10} {'A·x error':>10}")
    fine = True
    for n in (CSR_TILE, 169_343):
        for pattern in ("random", "banded"):
            spec = {"n": n, "pattern": pattern, "limit": limit}
            ours, peer = run_child({**spec, "case": "csr_trdb"}), run_child({**spec, "case": "csr_scipy"})
            if "failed" in ours or "failed" in peer:
                print(f"{n:>8} {pattern:>8} FAILED: {ours.get('failed') or peer.get('failed')}")
                fine = False
                continue
            ok = ours["error"] < 1e-5
            fine &= ok
            print(f"{n:>8} {pattern:>8} {ours['seconds']:8.3f} {peer['seconds']:8.3f} "
                  f"{ours['seconds'] / peer['seconds']:6.1f} {mib(ours['rss']):>14} {mib(ours['base']):>10} "
                  f"{ours['error']:10.1e}{'' if ok else '  WRONG'}")
    return fine


def coo_case(args: argparse.Namespace, folder: str) -> bool:
    path = os.path.join(folder, f"coo_{args.entries}_{args.n}.parquet")
    if not os.path.exists(path):
        started = time.perf_counter()
        coo_parquet(path, args.n, args.entries)
        print(f"\n(wrote {args.entries:,} entries to {path} in {time.perf_counter() - started:.1f} s)")
    spec = {"path": path, "n": args.n, "tile": args.tile, "limit": args.limit}
    results = {system: os.path.join(folder, f"{system}_ax.npy") for system in ("trdb", "scipy")}
    ours = run_child({**spec, "case": "coo_trdb", "result": results["trdb"]})
    peer = run_child({**spec, "case": "coo_scipy", "result": results["scipy"]})
    print(f"\n# FROM COO '{os.path.basename(path)}': {args.entries:,} entries, SHAPE ({args.n}, {args.n}) "
          f"TILE ({args.tile}, {args.tile}), memory_limit = '{args.limit}'")
    if "failed" in ours or "failed" in peer:
        print(f"FAILED: trdb: {ours.get('failed', 'ok')}; scipy: {peer.get('failed', 'ok')}")
        return False
    limit = parse_bytes(args.limit)
    got, want = np.load(results["trdb"]), np.load(results["scipy"])
    error = float(np.abs(got - want).max() / max(1e-30, np.abs(want).max()))
    within = ours["rss"] <= limit + OVERHEAD
    print(f"{'system':>8} {'seconds':>8} {'peak RSS':>10} {'(before)':>10}")
    print(f"{'trdb':>8} {ours['seconds']:8.2f} {mib(ours['rss']):>10} {mib(ours['base']):>10}   "
          f"{ours['tiles']} tiles; bound {mib(limit + OVERHEAD)}: {'within' if within else 'OVER'}; "
          f"peak with A·x {mib(ours['rss_with_product'])}")
    print(f"{'scipy':>8} {peer['seconds']:8.2f} {mib(peer['rss']):>10} {mib(peer['base']):>10}   "
          f"(no limit; read_table + coo_matrix(...).tocsr())")
    print(f"ratio trdb / scipy: {ours['seconds'] / peer['seconds']:.1f}x; A·x max relative error {error:.1e}")
    return within and error < 1e-5


def parse_bytes(text: str) -> int:
    units = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "B": 1}
    for unit, scale in units.items():
        if text.upper().endswith(unit):
            return int(float(text[:-len(unit)]) * scale)
    return int(text)


def main() -> None:
    args = arguments()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    cases, fine = args.cases.split(","), True
    if "csr" in cases:
        fine &= csr_case(args.limit)
    if "coo" in cases:
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            fine &= coo_case(args, args.keep)
        else:
            with tempfile.TemporaryDirectory() as folder:
                fine &= coo_case(args, folder)
    sys.exit(0 if fine else 1)


if __name__ == "__main__":
    main()
