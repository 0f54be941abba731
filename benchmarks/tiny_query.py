"""Latency of a tiny query whose plan is cached: a 4x4 tensor, a filter and a scalar multiply.

trdb (plan cache warm, the tensor's one tile in the buffer pool) against DuckDB and sqlite3 running
the same filter and multiply over the 16 values as (i, j, v) rows, each with its query prepared or
cached as the system allows. What is measured is the per-statement path: parse or cache lookup,
planning, execution start and the result; the data is trivial. Times are the best of many
batches of runs (per query), the systems taking turns.

    python benchmarks/tiny_query.py [--runs 2000] [--repeats 7]
"""
from __future__ import annotations

import argparse
import sqlite3

import duckdb
import numpy as np

import trdb
from timing import best_of_alternating, check

TRDB_QUERY = "SELECT i, j, v * 2 AS v FROM T WHERE i = 0"
SQL_QUERY = "SELECT i, j, v * 2 AS v FROM t WHERE i < 2"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000, help="queries per timed batch")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    values = np.arange(16, dtype=np.float32).reshape(4, 4)
    con = trdb.connect()
    cur = con.cursor()
    cur.execute("CREATE TENSOR T FROM ? TILE (2, 4)", [values])  # two tiles of two rows: the filter keeps one
    rows = [(i, j, float(values[i, j])) for i in range(4) for j in range(4)]
    duck = duckdb.connect()
    duck.execute("CREATE TABLE t (i INTEGER, j INTEGER, v FLOAT)")
    duck.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    lite = sqlite3.connect(":memory:")
    lite.execute("CREATE TABLE t (i INTEGER, j INTEGER, v REAL)")
    lite.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)

    def batch(run):
        def many():
            for _ in range(args.runs):
                result = run()
            return result
        return many

    results = best_of_alternating(args.repeats, {
        "trdb": batch(lambda: cur.execute(TRDB_QUERY).fetchall()),
        "duckdb": batch(lambda: duck.execute(SQL_QUERY).fetchall()),
        "sqlite3": batch(lambda: lite.execute(SQL_QUERY).fetchall())})
    (_, _, tile), = results["trdb"][1]
    check("trdb", np.asarray(tile), values[:2].astype(np.float64) * 2, 0.0)
    check("duckdb", np.array(sorted(results["duckdb"][1]))[:, 2], values[:2].ravel().astype(np.float64) * 2, 0.0)
    print(f"# best of {args.repeats} batches of {args.runs} queries, systems taking turns; "
          "warm: trdb's plan cache and buffer pool, DuckDB's and sqlite3's statement caches")
    base = results["trdb"][0]
    for name, (seconds, _) in results.items():
        print(f"{name:8s} {seconds / args.runs * 1e6:9.1f} us per query  {seconds / base:7.3f}x trdb")


if __name__ == "__main__":
    main()
