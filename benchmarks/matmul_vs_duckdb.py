"""Dense matrix product: numpy (BLAS) against trdb (tiles + BLAS) against DuckDB plain SQL (rows).

The thesis of trdb in one table: a matrix product written as a relational query runs near BLAS
speed when the relation holds tiles, and orders of magnitude slower when it holds one row per
element. Every result is checked against numpy before it is printed.

    python benchmarks/matmul_vs_duckdb.py                       # n = 512 and 2048
    python benchmarks/matmul_vs_duckdb.py --sizes 512 --tile 128
    python benchmarks/matmul_vs_duckdb.py --duckdb-timeout 120 --skip-duckdb 2048
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import duckdb
import numpy as np
import pyarrow as pa
import threadpoolctl

import trdb
from timing import timed_runs

TRDB_QUERY = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"
DUCKDB_QUERY = "SELECT a.i, b.j, SUM(a.value * b.value) AS value FROM a JOIN b ON a.j = b.i GROUP BY a.i, b.j"
LONG_RUN_S = 10.0  # a DuckDB run longer than this is not repeated: its noise is small against its length


@dataclass
class Measurement:
    """Best time of a system at one size; `lower_bound` when it ran out of its time budget."""

    seconds: Optional[float] = None
    lower_bound: bool = False
    load_seconds: Optional[float] = None
    max_abs_error: Optional[float] = None
    runs: list[float] = field(default_factory=list)
    note: str = ""


def arguments(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="512,2048", help="comma-separated n (A and B are n x n); default 512,2048")
    parser.add_argument("--tile", type=int, default=256, help="trdb tile size t: TILE (t, t); default 256")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs after one warm-up (best is kept); default 5")
    parser.add_argument("--duckdb-timeout", type=float, default=600.0,
                        help="seconds one DuckDB query may run before it is interrupted; default 600")
    parser.add_argument("--skip-duckdb", default="", help="comma-separated sizes at which DuckDB is not run")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    return parser.parse_args(argv)


def int_list(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


# ---------------------------------------------------------------- environment and checking

def print_environment() -> None:
    print(f"python {platform.python_version()}, numpy {np.__version__}, duckdb {duckdb.__version__}, "
          f"pyarrow {pa.__version__}, {os.cpu_count()} cores ({platform.machine()})")
    for variable in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        print(f"  {variable}={os.environ.get(variable, '(unset)')}")
    for pool in threadpoolctl.threadpool_info():
        print(f"  BLAS: {pool.get('internal_api')} {pool.get('version')} kernel={pool.get('architecture')} "
              f"threads={pool.get('num_threads')} ({os.path.basename(pool.get('filepath', ''))})")
    print()


def tolerance(a: np.ndarray, b: np.ndarray) -> float:
    """The float32 worst-case bound on one entry of a @ b: n * eps * max (|A| @ |B|)."""
    n = a.shape[1]
    scale = float(np.max(np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)))
    return n * float(np.finfo(np.float32).eps) * scale


def check(name: str, n: int, result: np.ndarray, reference: np.ndarray, limit: float) -> float:
    """Max abs error of result against the float64 reference; exits if it is beyond float32 tolerance."""
    if result.shape != reference.shape:
        sys.exit(f"{name} at n={n}: result has shape {result.shape}, expected {reference.shape}")
    error = float(np.max(np.abs(result.astype(np.float64) - reference)))
    if not error <= limit:
        sys.exit(f"{name} at n={n}: max abs error {error:.3g} exceeds the float32 tolerance {limit:.3g}")
    return error


def best_of(run: Callable[[], object], repeats: int) -> tuple[float, list[float], object]:
    """One warm-up run, then `repeats` timed runs (timing.timed_runs); the best time, all times and the last output."""
    times, output = timed_runs(repeats, run)
    return min(times), times, output


# ---------------------------------------------------------------- the three systems

def run_numpy(a: np.ndarray, b: np.ndarray, reference: np.ndarray, limit: float, repeats: int) -> Measurement:
    best, times, c = best_of(lambda: a @ b, repeats)
    return Measurement(best, runs=times, max_abs_error=check("numpy", len(a), c, reference, limit))


def run_trdb(a: np.ndarray, b: np.ndarray, reference: np.ndarray, limit: float, tile: int,
             repeats: int) -> Measurement:
    con = trdb.connect()
    try:
        cur = con.cursor()
        # One-time costs (building the parser, pyarrow's lazy imports) are not load time.
        cur.execute("CREATE TENSOR warmup FROM ? TILE (1, 1)", [np.ones((1, 1), dtype=np.float32)])
        cur.execute("DROP TENSOR warmup")
        started = time.perf_counter()
        cur.execute(f"CREATE TENSOR A FROM ? TILE ({tile}, {tile})", [a])
        cur.execute(f"CREATE TENSOR B FROM ? TILE ({tile}, {tile})", [b])
        load = time.perf_counter() - started

        def query() -> np.ndarray:
            cur.execute(TRDB_QUERY)
            return cur.fetch_tensor()

        best, times, c = best_of(query, repeats)
    finally:
        con.close()
    return Measurement(best, load_seconds=load, runs=times,
                       max_abs_error=check("trdb", len(a), c, reference, limit))


def coordinate_table(matrix: np.ndarray) -> pa.Table:
    """An n x m matrix as (i, j, value) rows, row-major."""
    rows, cols = matrix.shape
    i, j = np.divmod(np.arange(rows * cols, dtype=np.int64), cols)
    return pa.table({"i": i, "j": j, "value": matrix.ravel()})


def timed_duckdb_query(con: duckdb.DuckDBPyConnection, timeout: float) -> tuple[float, Optional[pa.Table]]:
    """Run the query and fetch its whole result; None as the table when it was interrupted."""
    timer = threading.Timer(timeout, con.interrupt)
    timer.daemon = True
    started = time.perf_counter()
    timer.start()
    try:
        table = con.sql(DUCKDB_QUERY).to_arrow_table()
    except duckdb.InterruptException:
        table = None
    finally:
        timer.cancel()
    return time.perf_counter() - started, table


def run_duckdb(a: np.ndarray, b: np.ndarray, reference: np.ndarray, limit: float, timeout: float,
               repeats: int) -> Measurement:
    con = duckdb.connect()
    try:
        started = time.perf_counter()
        for name, matrix in (("a", a), ("b", b)):
            data = coordinate_table(matrix)
            con.register("incoming", data)
            con.execute(f"CREATE TABLE {name} AS SELECT * FROM incoming")
            con.unregister("incoming")
        load = time.perf_counter() - started
        # No warm-up run: DuckDB caches no results, and one run can take minutes.
        times, table = [], None
        for _ in range(max(repeats, 1)):
            seconds, table = timed_duckdb_query(con, timeout)
            if table is None:
                return Measurement(seconds, lower_bound=True, load_seconds=load,
                                   note=f"interrupted after {seconds:.3g} s (--duckdb-timeout {timeout:g})")
            times.append(seconds)
            if seconds > LONG_RUN_S:
                break
    finally:
        con.close()
    n, m = reference.shape
    c = np.zeros((n, m), dtype=np.float64)
    c[table.column("i").to_numpy(), table.column("j").to_numpy()] = table.column("value").to_numpy()
    return Measurement(min(times), load_seconds=load, runs=times,
                       max_abs_error=check("duckdb", n, c, reference, limit))


# ---------------------------------------------------------------- the report

def seconds_text(m: Optional[Measurement]) -> str:
    if m is None or m.seconds is None:
        return "skipped"
    return f"{'>= ' if m.lower_bound else ''}{m.seconds:.4g}"


def ratio_text(numerator: Optional[Measurement], denominator: Optional[Measurement]) -> str:
    if numerator is None or denominator is None or numerator.seconds is None or denominator.seconds is None:
        return "-"
    if denominator.lower_bound:
        return "-"
    value = numerator.seconds / denominator.seconds
    return f"{'>= ' if numerator.lower_bound else ''}{value:,.1f}x"


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[c]) for r in rows)) for c, h in enumerate(header)]
    line = lambda cells: "| " + " | ".join(cell.rjust(w) for cell, w in zip(cells, widths)) + " |"
    print(line(header))
    print("|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|")
    for row in rows:
        print(line(row))


def report(results: list[tuple[int, Measurement, Measurement, Optional[Measurement]]], tile: int) -> None:
    print_table(["n", "numpy s", "trdb s", "duckdb s", "trdb/numpy", "duckdb/trdb"],
                [[str(n), seconds_text(np_), seconds_text(tr), seconds_text(dd), ratio_text(tr, np_),
                  ratio_text(dd, tr)] for n, np_, tr, dd in results])
    print()
    print(f"Load times (not in the table; trdb: both CREATE TENSOR ... FROM ? TILE ({tile}, {tile}); "
          "duckdb: both tables from Arrow) and max abs errors against a float64 reference:")
    print_table(["n", "trdb load s", "duckdb load s", "numpy err", "trdb err", "duckdb err"],
                [[str(n), _fmt(tr.load_seconds), _fmt(dd.load_seconds if dd else None),
                  _fmt(np_.max_abs_error), _fmt(tr.max_abs_error), _fmt(dd.max_abs_error if dd else None)]
                 for n, np_, tr, dd in results])
    for n, _, _, dd in results:
        if dd is not None and dd.note:
            print(f"n={n}: duckdb {dd.note}; its time and ratio are lower bounds")


def _fmt(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.3g}"


def main(argv: Optional[list[str]] = None) -> None:
    args = arguments(argv)
    sizes, skip = int_list(args.sizes), set(int_list(args.skip_duckdb))
    print_environment()
    rng = np.random.default_rng(args.seed)
    results = []
    for n in sizes:
        a = rng.random((n, n), dtype=np.float32)
        b = rng.random((n, n), dtype=np.float32)
        reference = a.astype(np.float64) @ b.astype(np.float64)
        limit = tolerance(a, b)
        print(f"n={n}: {n}^3 = {n ** 3:.3g} multiply-adds; tolerance {limit:.3g}", flush=True)
        numpy_m = run_numpy(a, b, reference, limit, args.repeats)
        print(f"  numpy  best {numpy_m.seconds:.4g} s of {_runs(numpy_m)}", flush=True)
        trdb_m = run_trdb(a, b, reference, limit, args.tile, args.repeats)
        print(f"  trdb   best {trdb_m.seconds:.4g} s of {_runs(trdb_m)} (load {trdb_m.load_seconds:.3g} s)",
              flush=True)
        duck_m = None
        if n not in skip:
            duck_m = run_duckdb(a, b, reference, limit, args.duckdb_timeout, args.repeats)
            print(f"  duckdb {seconds_text(duck_m)} s {_runs(duck_m) if duck_m.runs else ''}"
                  f"(load {duck_m.load_seconds:.3g} s)", flush=True)
        results.append((n, numpy_m, trdb_m, duck_m))
    print()
    report(results, args.tile)


def _runs(m: Measurement) -> str:
    return "[" + ", ".join(f"{t:.4g}" for t in m.runs) + "] "


if __name__ == "__main__":
    main()
