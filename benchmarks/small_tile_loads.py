"""Loading many small tiles into a database file: n tiles of 64 float32 (`CREATE TENSOR ... FROM ? TILE (1, 64)`,
one embedding a tuple) in trdb, against DuckDB inserting the same rows as a FLOAT[64] column from Arrow, each
followed by a CHECKPOINT, both into a new file.

    python benchmarks/small_tile_loads.py                  # n = 200,000 and 1,000,000
    python benchmarks/small_tile_loads.py --tuples 50000   # one size

Each load runs `--repeats` times into a fresh file (nothing is reused), trdb and DuckDB taking turns;
medians are compared (trdb / DuckDB), with microseconds a tuple. The loaded values are checked.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

import trdb


def load_trdb(path: Path, data: np.ndarray) -> float:
    started = time.perf_counter()
    with trdb.connect(str(path)) as con:
        con.execute("CREATE TENSOR E FROM ? TILE (1, 64)", [data])
        con.execute("CHECKPOINT")
    elapsed = time.perf_counter() - started
    with trdb.connect(str(path)) as con:
        np.testing.assert_array_equal(con.execute("SELECT * FROM E").fetch_tensor(), data)
    return elapsed


def load_duckdb(path: Path, data: np.ndarray) -> float:
    table = pa.table({"i": pa.array(np.arange(len(data), dtype=np.int64)),
                      "v": pa.FixedSizeListArray.from_arrays(pa.array(data.reshape(-1)), 64)})
    started = time.perf_counter()
    con = duckdb.connect(str(path))
    con.register("rows_in", table)
    con.execute("CREATE TABLE e (i BIGINT, v FLOAT[64])")
    con.execute("INSERT INTO e SELECT i, v::FLOAT[64] FROM rows_in")
    con.execute("CHECKPOINT")
    con.close()
    elapsed = time.perf_counter() - started
    with duckdb.connect(str(path), read_only=True) as check:
        assert check.execute("SELECT count(*) FROM e").fetchone()[0] == len(data)
    return elapsed


def measure(n: int, repeats: int) -> None:
    data = np.random.default_rng(0).standard_normal((n, 64)).astype(np.float32)
    times: dict[str, list] = {"trdb": [], "duckdb": []}
    with tempfile.TemporaryDirectory() as folder:
        for run in range(repeats):  # taking turns, a new file each time
            times["trdb"].append(load_trdb(Path(folder) / f"t{run}.trdb", data))
            times["duckdb"].append(load_duckdb(Path(folder) / f"d{run}.duckdb", data))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"n = {n:>9,} tiles of 64 float32: trdb {med['trdb']:.3f} s, DuckDB {med['duckdb']:.3f} s, "
          f"{med['trdb'] / med['duckdb']:.1f}x, {1e6 * med['trdb'] / n:.2f} us a tuple")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuples", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for n in args.tuples:
        measure(n, args.repeats)


if __name__ == "__main__":
    main()
