"""Out-of-core execution: tensors 4x and 8x memory_limit, peak resident memory and time per statement,
the same statement with no limit, and write and scan throughput against raw DuckDB.

Every statement runs in a fresh child process (this script with `--child`) on a file database:
peak resident memory is that child's `ru_maxrss` (read as VmHWM, since getrusage's starts a child
at its parent's peak; it counts the file pages of a memory-mapped input the child touched), `anon`
the peak of its anonymous memory (RssAnon, sampled every 20 ms), `base`
what the interpreter with numpy, pyarrow, DuckDB and trdb loaded holds before the statement.
Each child runs under an address-space limit (RLIMIT_AS: 3x its expected need plus 4 GB) only as a
guard. The check is peak RSS <= memory_limit + 400 MB and time <= 3x the time with no limit;
results are checked against numpy on sampled tiles or on a reduction, computed from the inputs
chunk by chunk (A, P, Q and X are .npy files made here; trdb loads them memory-mapped, `FROM ?`).

Cases (n x n float32 tensors of 4x and 8x memory_limit; the others scale with --scale):
load (`CREATE TENSOR A FROM ?` of a memory-mapped .npy), fill (`FILL RANDOM_NORMAL`), scan
(`SUM(SUMSQ(A.v))`), elementwise (`CREATE TENSOR B AS ... RELU(A.v)`), transpose_add
(`A.v + TRANSPOSE(B.v)` joining A(i,j) with B(j,i): a join whose build side does not fit, into a
new tensor), matmul (8192^2 inputs and result, into a new tensor), coo (`FROM COO` of 40M entries
in Parquet) and grad (`GRAD` of a least-squares loss over a 1 GiB X). The I/O table sets trdb's
load, fill and cold scan at 4x against DuckDB on the same BLOB tiles: `CREATE TABLE AS` from an
Arrow table built beforehand, plus `CHECKPOINT` (for FILL, plus numpy making the normals); and
a new connection's Arrow read of the BLOB column plus numpy's sum of squares.

    python benchmarks/out_of_core.py                 # memory_limit 256MB: 1 GiB and 2 GiB tensors
    python benchmarks/out_of_core.py --scale 0.25    # 64MB: 256 MiB and 512 MiB tensors
    python benchmarks/out_of_core.py --scale 0.25 --cases scan,matmul --sizes 4 --keep /tmp/ooc
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import trdb

MB = 1 << 20
CASES = ("load", "fill", "scan", "elementwise", "transpose_add", "matmul", "coo", "grad")
PER_SIZE = ("load", "fill", "scan", "elementwise", "transpose_add")
OVERHEAD = 400 * MB   # the allowance over memory_limit: the interpreter with its libraries, and slack
GUARD_BASE = 4 << 30


# ---- the child: one statement, measured ----------------------------------------------------------

class Sampler(threading.Thread):
    """Peaks sampled while the statement runs: anonymous resident memory (RssAnon, every 20 ms) and the
    bytes under temp_directory (every 10th sample): what trdb and DuckDB spilled."""

    def __init__(self, temp: str) -> None:
        super().__init__(daemon=True)
        self.temp, self.anon, self.spilled, self.done = temp, 0, 0, threading.Event()
        self.start()

    def run(self) -> None:
        count = 0
        while not self.done.wait(0.02):
            self.anon = max(self.anon, anon_bytes())
            count += 1
            if count % 10 == 0:
                self.spilled = max(self.spilled, folder_bytes(self.temp))

    def stop(self) -> None:
        self.done.set()
        self.join()


def anon_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def folder_bytes(path: str) -> int:
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.path.getsize(os.path.join(folder, name))
            except OSError:
                pass  # removed meanwhile
    return total


def max_rss() -> int:
    """This process's peak resident memory: ru_maxrss as the kernel keeps it for this image (VmHWM); the
    getrusage field itself starts a child at its parent's peak (Linux carries it across fork and exec)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def tiles_of(path: str, tile: int):
    """The .npy file at `path`, memory-mapped, and a function giving its tile at key (a, b)."""
    array = np.load(path, mmap_mode="r")
    return array, lambda a, b: np.asarray(array[a * tile:(a + 1) * tile, b * tile:(b + 1) * tile], np.float64)


def sample_keys(grid: int) -> list[tuple[int, int]]:
    return sorted({(0, 0), (grid - 1, grid - 1), (0, grid - 1), (grid // 2, grid // 3)})


def stored_tile(cur, tensor: str, a: int, b: int) -> np.ndarray:
    rows = cur.execute(f"SELECT {tensor}.v FROM {tensor} WHERE {tensor}.i = {a} AND {tensor}.j = {b}").fetchall()
    return np.asarray(rows[0][0], np.float64) if rows else np.zeros(0)


def close_to(got: np.ndarray, want: np.ndarray, relative: float = 1e-4) -> bool:
    return got.shape == want.shape and float(np.abs(got - want).max()) <= relative * max(1.0, float(np.abs(want).max()))


def tiles_check(target: str, expected_tile, grid: int):
    def check(cur, _result):
        bad = [k for k in sample_keys(grid) if not close_to(stored_tile(cur, target, *k), expected_tile(*k))]
        return not bad, f"{len(sample_keys(grid))} sampled tiles" + (f", wrong: {bad}" if bad else "")
    return check


def statement(spec: dict, target: str):
    """The statement of `spec`'s case writing into `target`: (sql, params, check(cur, rows) -> (ok, detail))."""
    case, t, data = spec["case"], spec["tile"], spec["data"]
    if case == "load":
        _, tile = tiles_of(data["a"], t)
        return (f"CREATE TENSOR {target} FROM ? TILE ({t}, {t})", [np.load(data["a"], mmap_mode="r")],
                tiles_check(target, tile, spec["grid"]))
    if case == "fill":
        n = spec["n"]

        def moments(cur, _rows):
            total, count = cur.execute(f"SELECT SUM(SUMSQ({target}.v)), COUNT(*) FROM {target}").fetchone()
            variance = float(total) / n / n
            return count == spec["grid"] ** 2 and abs(variance - 1) < 0.01, f"{count} tiles, variance {variance:.4f}"
        return f"CREATE TENSOR {target} SHAPE ({n}, {n}) TILE ({t}, {t}) FILL RANDOM_NORMAL(0, 1, 42)", [], moments
    if case == "scan":
        def against(cur, rows):
            got = float(rows[0][0])
            return abs(got - data["sumsq"]) <= 1e-3 * data["sumsq"], f"{got:.6g} vs numpy {data['sumsq']:.6g}"
        return "SELECT SUM(SUMSQ(A.v)) FROM A", [], against
    if case == "elementwise":
        _, tile = tiles_of(data["a"], t)
        return (f"CREATE TENSOR {target} AS SELECT A.i, A.j, RELU(A.v) AS v FROM A", [],
                tiles_check(target, lambda a, b: np.maximum(tile(a, b), 0), spec["grid"]))
    if case == "transpose_add":
        _, tile = tiles_of(data["a"], t)
        return (f"CREATE TENSOR {target} AS SELECT A.i, A.j, A.v + TRANSPOSE(B.v) AS v "
                "FROM A JOIN B ON A.i = B.j AND A.j = B.i", [],
                tiles_check(target, lambda a, b: tile(a, b) + np.maximum(tile(b, a), 0).T, spec["grid"]))
    if case == "matmul":
        p, q = np.load(data["p"], mmap_mode="r"), np.load(data["q"], mmap_mode="r")
        product = lambda a, b: np.asarray(p[a * t:(a + 1) * t], np.float64) @ np.asarray(q[:, b * t:(b + 1) * t], np.float64)
        return (f"CREATE TENSOR {target} AS SELECT P.i, Q.j, SUM(MATMUL(P.v, Q.v)) AS v FROM P JOIN Q ON P.j = Q.i "
                "GROUP BY P.i, Q.j", [], tiles_check(target, product, spec["grid"]))
    if case == "coo":
        n, ct = data["coo_n"], data["coo_tile"]

        def total(cur, _rows):
            got, count = cur.execute(f"SELECT SUM(REDUCE_SUM({target}.v)), COUNT(*) FROM {target}").fetchone()
            ok = abs(float(got) - data["coo_sum"]) <= 1e-4 * data["coo_sum"]
            return ok, f"{count} tiles, sum {float(got):.6g} vs {data['coo_sum']:.6g}"
        return (f"CREATE TENSOR {target} FROM COO '{data['coo']}' (r, c, w) SHAPE ({n}, {n}) TILE ({ct}, {ct})",
                [], total)
    if case == "grad":
        want = np.load(data["gradient"])

        def gradient(cur, _rows):
            got = cur.execute("SELECT * FROM GRAD(loss, W)").fetch_tensor()
            return close_to(np.asarray(got, np.float64), want, 1e-3), f"gradient {got.shape} vs numpy"
        return "SELECT * FROM GRAD(loss, W)", [], gradient
    raise SystemExit(f"unknown case {case!r}")


def setup(cur, spec: dict) -> None:
    """Tensors a case reads that another case does not make: P and Q (matmul); X, W, Y and the views (grad)."""
    data, t = spec["data"], spec["tile"]
    if spec["case"] == "setup_matmul":
        for name in ("p", "q"):
            cur.execute(f"CREATE TENSOR {name.upper()} FROM ? TILE ({t}, {t})", [np.load(data[name], mmap_mode="r")])
    elif spec["case"] == "setup_grad":
        features = data["features"]
        for name, tile in (("X", (t, features)), ("W", (features, 1)), ("Y", (t, 1))):
            cur.execute(f"CREATE TENSOR {name} FROM ? TILE {tile}", [np.load(data[name.lower()], mmap_mode="r")])
        cur.execute("CREATE VIEW pred AS SELECT X.i, W.j, SUM(MATMUL(X.v, W.v)) AS v FROM X JOIN W ON X.j = W.i "
                    "GROUP BY X.i, W.j")
        cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(p.v - Y.v)) AS v FROM pred AS p JOIN Y "
                    "ON p.i = Y.i AND p.j = Y.j")


def child(spec: dict) -> dict:
    guard = spec["guard"]
    resource.setrlimit(resource.RLIMIT_AS, (guard, guard))
    base = max_rss()
    con = trdb.connect(spec["database"])
    cur = con.cursor()
    os.makedirs(os.path.join(spec["temp"], "duckdb"), exist_ok=True)  # DuckDB makes only the last folder
    cur.execute(f"SET temp_directory = '{spec['temp']}'")
    if spec["limit"]:
        cur.execute(f"SET memory_limit = '{spec['limit']}B'")
    if spec["case"].startswith("setup_"):
        setup(cur, spec)
        con.close()
        return {"ok": True}
    made = {"load": "A", "fill": "F", "elementwise": "B", "transpose_add": "C", "matmul": "R", "coo": "E"}
    target = made[spec["case"]] + spec["suffix"] if spec["case"] in made else ""
    sql, params, check = statement(spec, target)
    if target:
        cur.execute(f"DROP TENSOR IF EXISTS {target}")
    sampler = Sampler(spec["temp"])
    started = time.perf_counter()
    cur.execute(sql, params)
    rows = cur.fetchall() if spec["case"] == "scan" else None
    seconds = time.perf_counter() - started
    peak = max_rss()
    sampler.stop()
    ok, detail = check(cur, rows)
    if target and spec["drop"]:
        cur.execute(f"DROP TENSOR {target}")
    con.close()
    return {"seconds": seconds, "rss": peak, "base": base, "anon": sampler.anon, "spilled": sampler.spilled,
            "ok": bool(ok), "detail": detail}


# ---- the DuckDB peers (children too) --------------------------------------------------------------

def tile_table(tiles) -> pa.Table:
    """(k0, k1, v) with each tile's bytes as a BLOB, as trdb stores a dense tile."""
    keys, blobs = zip(*tiles)
    return pa.table({"k0": [k[0] for k in keys], "k1": [k[1] for k in keys], "v": pa.array(blobs, pa.large_binary())})


def duckdb_write(path: str, table: pa.Table) -> None:
    con = duckdb.connect(path)
    con.register("incoming", table)
    con.execute("CREATE TABLE t AS SELECT * FROM incoming")
    con.execute("CHECKPOINT")
    con.close()


def duckdb_child(spec: dict) -> dict:
    path, t, grid = spec["duckdb"] + (".fill" if spec["case"] == "duckdb_fill" else ""), spec["tile"], spec["grid"]
    for stale in (path, path + ".wal"):
        if spec["case"] != "duckdb_scan" and os.path.exists(stale):
            os.remove(stale)
    started = time.perf_counter()
    if spec["case"] == "duckdb_write":
        a = np.load(spec["data"]["a"], mmap_mode="r")
        table = tile_table(((i, j), np.ascontiguousarray(a[i * t:(i + 1) * t, j * t:(j + 1) * t]).tobytes())
                           for i in range(grid) for j in range(grid))
        started = time.perf_counter()
        duckdb_write(path, table)
    elif spec["case"] == "duckdb_fill":
        rng = np.random.default_rng(42)
        duckdb_write(path, tile_table(((i, j), rng.standard_normal((t, t), np.float32).tobytes())
                                      for i in range(grid) for j in range(grid)))
    else:  # a new connection's Arrow read of the BLOB column, and numpy's sum of squares per tile
        con, total = duckdb.connect(path, read_only=True), 0.0
        reader = con.sql("SELECT k0, k1, v FROM t").to_arrow_reader(64)
        for batch in reader:
            for blob in batch.column(2).to_pylist():
                tile = np.frombuffer(blob, np.float32)
                total += float(np.dot(tile, tile))
        con.close()
        if abs(total - spec["data"]["sumsq"]) > 1e-3 * spec["data"]["sumsq"]:
            return {"error": f"DuckDB scan: sum of squares {total:.6g}, numpy {spec['data']['sumsq']:.6g}"}
    seconds = time.perf_counter() - started
    if spec["case"] == "duckdb_fill":
        os.remove(path)
    return {"seconds": seconds, "rss": max_rss(), "ok": True, "detail": ""}


# ---- the parent: data, children, tables ----------------------------------------------------------

def run_child(spec: dict, timeout: float) -> dict:
    """Run one spec in a fresh child: its report (a failure it caught says what and its peak RSS)."""
    command = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        timer = threading.Timer(timeout, process.kill)
        timer.start()
        _, status = os.waitpid(process.pid, 0)
        timer.cancel()
        process.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        lines, errors = out.read().strip().splitlines(), err.read().strip().splitlines()
    if lines and lines[-1].startswith("{"):
        return json.loads(lines[-1])
    reason = errors[-1] if errors else f"killed by signal {-code}" if code < 0 else f"exit {code}"
    return {"error": reason[:300], "rss": 0}  # killed: wait4's ru_maxrss would include this process's peak


def write_npy(path: str, shape: tuple[int, int], seed: int, band: int = 1024) -> None:
    """A float32 standard normal array written band by band (never whole in memory)."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=shape)
    for number, start in enumerate(range(0, shape[0], band)):
        rows = min(band, shape[0] - start)
        out[start:start + rows] = np.random.default_rng([seed, number]).standard_normal((rows, shape[1]), np.float32)
    out.flush()
    del out


def sum_of_squares(path: str, band: int = 1024) -> float:
    array = np.load(path, mmap_mode="r")
    return sum(float(np.sum(np.square(array[s:s + band], dtype=np.float64))) for s in range(0, len(array), band))


def least_squares_gradient(x: str, w: str, y: str, band: int = 4096) -> np.ndarray:
    """d/dW sum((XW - Y)^2) = 2 X^T (XW - Y), in float64, band by band."""
    X, W, Y = (np.load(p, mmap_mode="r") for p in (x, w, y))
    W = np.asarray(W, np.float64)
    total = np.zeros(W.shape)
    for s in range(0, len(X), band):
        block = np.asarray(X[s:s + band], np.float64)
        total += 2 * block.T @ (block @ W - Y[s:s + band])
    return total


def coo_parquet(path: str, n: int, entries: int, seed: int, chunk: int = 1 << 20) -> float:
    """Random (r, c, w) entries of an n x n matrix in Parquet, written a chunk at a time; the sum of w."""
    schema = pa.schema([("r", pa.int64()), ("c", pa.int64()), ("w", pa.float32())])
    total = 0.0
    with pq.ParquetWriter(path, schema) as writer:
        for number, start in enumerate(range(0, entries, chunk)):
            rng = np.random.default_rng([seed, number])
            size = min(chunk, entries - start)
            w = rng.uniform(0.5, 1.5, size).astype(np.float32)
            total += float(w.sum(dtype=np.float64))
            writer.write_table(pa.table({"r": rng.integers(0, n, size), "c": rng.integers(0, n, size), "w": w},
                                        schema=schema))
    return total


def side(nbytes: float, tile: int) -> int:
    """The side of a square float32 tensor of about `nbytes`, a whole number of tiles."""
    return max(1, round(math.sqrt(nbytes / 4) / tile)) * tile


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0,
                        help="memory_limit 256MB x scale, every size with it (tiles: 1024 x sqrt(scale)); default 1")
    parser.add_argument("--sizes", default="4,8", help="tensor sizes as multiples of memory_limit; default 4,8")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated, of: " + ", ".join(CASES))
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per child; default 1800")
    parser.add_argument("--keep", default="", help="work in this folder and keep it (default: a temporary one)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser.parse_args()


class Bench:
    """The runs of one invocation: where its files go, and what each measured."""

    def __init__(self, args: argparse.Namespace, folder: str):
        self.args, self.folder = args, folder
        self.limit = int(256 * MB * args.scale)
        self.tile = max(64, round(1024 * math.sqrt(args.scale) / 64) * 64)
        self.rows: list[tuple] = []
        self.io: dict[str, dict] = {}

    def path(self, name: str) -> str:
        return os.path.join(self.folder, name)

    def spec(self, case: str, database: str, data: dict, n: int, limited: bool, need: int, **extra) -> dict:
        guard = 3 * need + GUARD_BASE
        return {"case": case, "database": self.path(database), "data": data, "n": n, "tile": self.tile,
                "grid": max(1, n // self.tile), "limit": self.limit if limited else 0, "temp": self.path("temp"),
                "guard": guard, "suffix": "_lim" if limited else "", "drop": limited, **extra}

    def measure(self, case: str, label: str, database: str, data: dict, n: int, nbytes: int, keep: bool = True) -> None:
        """The statement with no limit (its tensor kept for later cases when `keep`), then with memory_limit."""
        free = run_child(self.spec(case, database, data, n, False, 4 * nbytes + OVERHEAD, drop=not keep),
                         self.args.timeout)
        limited = run_child(self.spec(case, database, data, n, True, self.limit + OVERHEAD), self.args.timeout)
        self.rows.append((case, label, limited, free))
        if case in ("load", "fill", "scan") and label.startswith(f"{self.sizes[0]}x"):
            self.io[case] = limited
        print(f"  {case:<14} {label:<22} {summary(limited)}   no limit: {summary(free)}", flush=True)

    @property
    def sizes(self) -> list[int]:
        return [int(s) for s in self.args.sizes.split(",") if s.strip()]

    def per_size(self, cases: set) -> None:
        wanted = [c for c in PER_SIZE if c in cases]
        if not wanted:
            return
        needed = PER_SIZE[:max(PER_SIZE.index(c) for c in wanted) + 1]  # each case reads what the ones before made
        for multiple in self.sizes:
            n = side(multiple * self.limit, self.tile)
            a = self.path(f"a-{multiple}x.npy")
            write_npy(a, (n, n), seed=multiple)
            data = {"a": a, "sumsq": sum_of_squares(a)}
            label = f"{multiple}x: {n}^2 ({n * n * 4 / MB:.0f} MiB)"
            for case in needed:
                self.measure(case, label, f"oc-{multiple}x.trdb", data, n, n * n * 4,
                             keep=case in ("load", "elementwise"))
            if multiple == self.sizes[0]:
                self.duckdb_peers(data, n)
            os.remove(a)

    def duckdb_peers(self, data: dict, n: int) -> None:
        for case in ("duckdb_write", "duckdb_fill", "duckdb_scan"):
            spec = self.spec(case, "unused", data, n, False, 4 * n * n * 4 + OVERHEAD, duckdb=self.path("peer.duckdb"))
            self.io[case] = run_child(spec, self.args.timeout)

    def matmul(self) -> None:
        n = side(256 * MB * self.args.scale, self.tile)  # 8192^2 at scale 1: inputs and result each the limit
        data = {"p": self.path("p.npy"), "q": self.path("q.npy")}
        write_npy(data["p"], (n, n), seed=101)
        write_npy(data["q"], (n, n), seed=102)
        run_child(self.spec("setup_matmul", "mm.trdb", data, n, False, 8 * n * n * 4 + OVERHEAD), self.args.timeout)
        self.measure("matmul", f"{n}^2 ({n * n * 4 / MB:.0f} MiB each)", "mm.trdb", data, n, 3 * n * n * 4, keep=False)

    def coo(self) -> None:
        # 100,000^2 with 4096^2 tiles at scale 1 (CSR, 0.4% full): one tile's dense size, which CREATE TENSOR
        # checks against memory_limit, is a quarter of the limit
        entries, n = int(40e6 * self.args.scale), round(100_000 * math.sqrt(self.args.scale))
        data = {"coo": self.path("coo.parquet"), "coo_n": n, "coo_tile": 4 * self.tile}
        data["coo_sum"] = coo_parquet(data["coo"], n, entries, seed=7)
        self.measure("coo", f"{entries / 1e6:.0f}M entries, {n:,}^2", "coo.trdb", data, n, entries * 20, keep=False)

    def grad(self) -> None:
        features = self.tile
        rows = max(1, round(GIB * self.args.scale / 4 / features / self.tile)) * self.tile
        data = {"x": self.path("x.npy"), "w": self.path("w.npy"), "y": self.path("y.npy"), "features": features}
        write_npy(data["x"], (rows, features), seed=201)
        write_npy(data["y"], (rows, 1), seed=202)
        np.save(data["w"], (np.random.default_rng(203).standard_normal((features, 1)) / math.sqrt(features))
                .astype(np.float32))
        data["gradient"] = self.path("gradient.npy")
        np.save(data["gradient"], least_squares_gradient(data["x"], data["w"], data["y"]))
        run_child(self.spec("setup_grad", "grad.trdb", data, rows, False, 4 * rows * features * 4 + OVERHEAD),
                  self.args.timeout)
        self.measure("grad", f"X {rows}x{features} ({rows * features * 4 / MB:.0f} MiB)", "grad.trdb", data, rows,
                     rows * features * 4, keep=False)


GIB = 1 << 30


def summary(report: dict) -> str:
    if "error" in report:
        return f"FAILED ({report['error'][:160]}; peak RSS {report.get('rss', 0) / MB:.0f} MiB)"
    return f"{report['seconds']:.2f} s, peak RSS {report['rss'] / MB:.0f} MiB" + ("" if report["ok"] else " WRONG")


def print_tables(bench: Bench) -> None:
    bound = bench.limit + OVERHEAD
    print(f"\n# memory_limit {bench.limit / MB:.0f} MiB, tiles {bench.tile}^2; RSS bound = memory_limit + 400 MiB "
          f"= {bound / MB:.0f} MiB; targets: RSS / bound <= 1, time / no-limit time <= 3")
    print(f"{'case':<14} {'size':<26} {'peak RSS':>9} {'anon':>7} {'base':>6} {'/bound':>7} {'temp':>7} "
          f"{'time s':>8} {'no-limit':>9} {'ratio':>6} {'RSS no-lim':>10}  result")
    for case, label, limited, free in bench.rows:
        free_s = f"{free['seconds']:9.2f}" if "error" not in free else f"{'failed':>9}"
        free_rss = f"{free.get('rss', 0) / MB:10.0f}"
        if "error" in limited:
            print(f"{case:<14} {label:<26} {limited.get('rss', 0) / MB:9.0f} {'':>7} {'':>6} "
                  f"{limited.get('rss', 0) / bound:7.2f} {'':>7} {'failed':>8} {free_s} {'':>6} {free_rss}  "
                  f"error: {limited['error'][:200]}")
            continue
        ratio = f"{limited['seconds'] / free['seconds']:6.2f}" if "error" not in free else f"{'':>6}"
        print(f"{case:<14} {label:<26} {limited['rss'] / MB:9.0f} {limited['anon'] / MB:7.0f} "
              f"{limited['base'] / MB:6.0f} {limited['rss'] / bound:7.2f} {limited['spilled'] / MB:7.0f} "
              f"{limited['seconds']:8.2f} {free_s} {ratio} {free_rss}  "
              f"{'right' if limited['ok'] else 'WRONG'}: {limited['detail']}")
    print_io(bench)


def print_io(bench: Bench) -> None:
    pairs = (("load", "duckdb_write", "CREATE TENSOR A FROM ? (memmap)", "CTAS of the BLOB tiles + CHECKPOINT"),
             ("fill", "duckdb_fill", "FILL RANDOM_NORMAL", "numpy normals + CTAS + CHECKPOINT"),
             ("scan", "duckdb_scan", "cold SUM(SUMSQ(A.v))", "Arrow read of the BLOBs + numpy"))
    if not any(ours in bench.io for ours, *_ in pairs):
        return
    print(f"\n# I/O at {bench.sizes[0]}x memory_limit (file databases, a new process each; target trdb / DuckDB <= 1.2)")
    print(f"{'trdb (with memory_limit)':<34} {'s':>8}   {'DuckDB peer':<38} {'s':>8} {'ratio':>6}")
    for ours, theirs, our_label, their_label in pairs:
        mine, peer = bench.io.get(ours, {"error": "not run"}), bench.io.get(theirs, {"error": "not run"})
        mine_s = f"{mine['seconds']:8.2f}" if "error" not in mine else f"{'failed':>8}"
        peer_s = f"{peer['seconds']:8.2f}" if "error" not in peer else f"{'failed':>8}"
        ratio = f"{mine['seconds'] / peer['seconds']:6.2f}" if "error" not in mine and "error" not in peer else ""
        print(f"{our_label:<34} {mine_s}   {their_label:<38} {peer_s} {ratio}")
        for report in (mine, peer):
            if "error" in report:
                print(f"    error: {report['error'][:200]}")


def main() -> None:
    args = arguments()
    if args.child:
        spec = json.loads(args.child)
        try:
            report = duckdb_child(spec) if spec["case"].startswith("duckdb_") else child(spec)
        except Exception as exc:  # the report says what failed, in one line; the peak so far comes with it
            report = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300], "rss": max_rss()}
        print(json.dumps(report))
        return
    folder = args.keep or tempfile.mkdtemp(prefix="trdb-out-of-core-")
    os.makedirs(folder, exist_ok=True)
    bench, cases = Bench(args, folder), {c.strip() for c in args.cases.split(",") if c.strip()}
    unknown = cases - set(CASES)
    if unknown:
        raise SystemExit(f"unknown cases {sorted(unknown)}: use {', '.join(CASES)}")
    print(f"# {os.cpu_count()} CPU cores; memory_limit {bench.limit / MB:.0f} MiB; work folder {folder}", flush=True)
    try:
        bench.per_size(cases)
        for case in ("matmul", "coo", "grad"):
            if case in cases:
                getattr(bench, case)()
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    print_tables(bench)


if __name__ == "__main__":
    main()
