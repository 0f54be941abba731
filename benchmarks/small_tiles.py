"""Many small tiles: n tuples of 8 x 8 float32 tiles. Scan + elementwise + SUM(SUMSQ(...)), and an UPDATE ... SET
v = v * a + b, in trdb, against DuckDB over the same rows stored as FLOAT[64] arrays (its array functions) and numpy
on the stacked (n, 8, 8) array.

    python benchmarks/small_tiles.py                 # n = 200,000 and 1,000,000
    python benchmarks/small_tiles.py --tuples 50000  # one size

Each statement runs `--repeats` times, trdb and its peers taking turns; medians are compared (ratios
trdb / peer), with microseconds a tuple. Every statement reads what the last one left (nothing is
cached between runs but the buffer pool, as for any repeated query); each UPDATE changes every
value, so no run reuses the one before. The UPDATEs start with `--warmup` untimed rounds (each system
once a round): the first UPDATE of a process touches fresh memory, which on a virtual machine cost
trdb 1.5-4.4 s against 0.7-1.0 s later, run to run. Sums are checked against numpy in float64; after the
UPDATEs, trdb's tensor and DuckDB's table are checked against numpy's array.
"""
from __future__ import annotations

import argparse
import statistics
import time

import duckdb
import numpy as np
import pyarrow as pa

import trdb

QUERIES = {
    "SUM(SUMSQ(v))": ("SELECT SUM(SUMSQ(T.v)) AS v FROM T", "SELECT sum(array_inner_product(v, v)) FROM t",
                      lambda a: float((a.astype(np.float64) ** 2).sum()), lambda a: float(np.einsum("ijk,ijk->", a, a))),
    "SUM(SUMSQ(v * 2 + 1))": (
        "SELECT SUM(SUMSQ(T.v * 2 + 1)) AS v FROM T",
        "SELECT sum(list_sum(list_transform(v::FLOAT[], lambda x: (x * 2 + 1) * (x * 2 + 1)))) FROM t",
        lambda a: float(((a.astype(np.float64) * 2 + 1) ** 2).sum()), lambda a: float(((a * 2 + 1) ** 2).sum())),
}


def timed(run) -> tuple[float, object]:
    started = time.perf_counter()
    out = run()
    return time.perf_counter() - started, out


def measure(n: int, repeats: int, warmup: int) -> None:
    data = np.random.default_rng(0).standard_normal((n, 8, 8)).astype(np.float32)
    con = trdb.connect()
    load_trdb, _ = timed(lambda: con.execute("CREATE TENSOR T FROM ? TILE (8, 8)", [data.reshape(n * 8, 8)]))
    duck = duckdb.connect()
    values = pa.FixedSizeListArray.from_arrays(pa.array(data.reshape(-1)), 64)
    duck.register("rows_in", pa.table({"i": pa.array(np.arange(n, dtype=np.int64)), "v": values}))
    load_duck, _ = timed(lambda: duck.execute("CREATE TABLE t AS SELECT i, v::FLOAT[64] AS v FROM rows_in"))
    print(f"\nn = {n:,} tiles of 8 x 8 float32 ({data.nbytes / 2**20:.0f} MiB); load: trdb {load_trdb:.2f} s, "
          f"DuckDB {load_duck:.2f} s")
    print(f"{'statement':24} {'trdb':>9} {'DuckDB':>9} {'numpy':>9} {'/DuckDB':>8} {'/numpy':>7} {'us/tuple':>9}")
    for label, (trql, sql, reference, peer) in QUERIES.items():
        times: dict[str, list] = {"trdb": [], "duckdb": [], "numpy": []}
        expected = reference(data)
        for _ in range(repeats):  # taking turns
            elapsed, rows = timed(lambda: con.execute(trql).fetchall())
            times["trdb"].append(elapsed)
            assert abs(float(rows[0][0]) - expected) <= 1e-4 * abs(expected), (label, rows, expected)
            elapsed, rows = timed(lambda: duck.execute(sql).fetchall())
            times["duckdb"].append(elapsed)
            assert abs(float(rows[0][0]) - expected) <= 1e-4 * abs(expected), (label, "duckdb", rows, expected)
            elapsed, value = timed(lambda: peer(data))
            times["numpy"].append(elapsed)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{label:24} {med['trdb']:8.3f}s {med['duckdb']:8.3f}s {med['numpy']:8.3f}s "
              f"{med['trdb'] / med['duckdb']:7.1f}x {med['trdb'] / med['numpy']:6.1f}x {1e6 * med['trdb'] / n:9.2f}")
    update(con, duck, data, repeats, warmup)
    con.close()
    duck.close()


def update(con, duck, data: np.ndarray, repeats: int, warmup: int) -> None:
    """UPDATE ... SET v = v * a + b over every tuple, taking turns, after `warmup` untimed rounds; the three
    end in the same values."""
    n, a, b = len(data), 1.0001, 0.5
    array = data.copy()
    times: dict[str, list] = {"trdb": [], "duckdb": [], "numpy": []}
    for round_ in range(warmup + repeats):
        if round_ == warmup:
            times = {name: [] for name in times}
        elapsed, _ = timed(lambda: con.execute(f"UPDATE T SET v = T.v * {a} + {b}"))
        times["trdb"].append(elapsed)
        elapsed, _ = timed(lambda: duck.execute(
            f"UPDATE t SET v = list_transform(v::FLOAT[], lambda x: x * {a} + {b})::FLOAT[64]"))
        times["duckdb"].append(elapsed)

        def step():
            np.multiply(array, np.float32(a), out=array)
            np.add(array, np.float32(b), out=array)
        elapsed, _ = timed(step)
        times["numpy"].append(elapsed)
    got = con.execute("SELECT * FROM T").fetch_tensor().reshape(n, 8, 8)
    np.testing.assert_allclose(got, array, rtol=1e-5, atol=1e-5)
    duck_values = duck.execute("SELECT v FROM t ORDER BY i").fetchnumpy()["v"]
    np.testing.assert_allclose(np.stack(duck_values).reshape(n, 8, 8), array, rtol=1e-5, atol=1e-5)
    med = {k: statistics.median(v) for k, v in times.items()}
    label = "UPDATE v = v * a + b"
    print(f"{label:24} {med['trdb']:8.3f}s {med['duckdb']:8.3f}s {med['numpy']:8.3f}s "
          f"{med['trdb'] / med['duckdb']:7.1f}x {med['trdb'] / med['numpy']:6.1f}x {1e6 * med['trdb'] / n:9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuples", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1, help="untimed UPDATE rounds first; default 1")
    args = parser.parse_args()
    for n in args.tuples:
        measure(n, args.repeats, args.warmup)


if __name__ == "__main__":
    main()
