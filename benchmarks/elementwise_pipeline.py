"""An elementwise pipeline, SIGMOID(A.v * 2 + 1), over 1 GB of float32 tiles at workers = 1 and 2.

numpy on the whole array in one thread is printed as the reference. The speed-up of 2 workers
over 1 is the number that matters: each worker runs the kernels on its own partition of tiles.

    python benchmarks/elementwise_pipeline.py [--n 16384] [--tile 1024] [--repeats 3]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import trdb
from timing import best_of

QUERY = "SELECT A.i, A.j, SIGMOID(A.v * 2 + 1) AS v FROM A"


def numpy_reference(A: np.ndarray, repeats: int) -> float:
    return best_of(repeats, lambda: 1 / (1 + np.exp(-(A * 2 + 1))))[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16384, help="A is n x n float32 (16384: 1 GiB)")
    parser.add_argument("--tile", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    con = trdb.connect()
    cur = con.cursor()
    started = time.perf_counter()
    cur.execute(f"CREATE TENSOR A SHAPE ({args.n}, {args.n}) TILE ({args.tile}, {args.tile}) "
                "FILL RANDOM_NORMAL(0, 1, 42)")
    print(f"# A: {args.n}x{args.n} float32 = {args.n * args.n * 4 / 2**30:.2f} GiB in {args.tile}x{args.tile} "
          f"tiles, created in {time.perf_counter() - started:.1f} s")
    numpy_s = numpy_reference(cur.execute("SELECT * FROM A").fetch_tensor(), args.repeats)
    times = {}
    for workers in (1, 2):
        cur.execute(f"SET workers = {workers}")
        times[workers] = best_of(args.repeats, lambda: cur.execute(QUERY).rowcount)[0]
    print(f"numpy (1 thread, whole array) {numpy_s:.3f} s")
    print(f"trdb workers=1 {times[1]:.3f} s   workers=2 {times[2]:.3f} s")
    print(f"speed-up of 2 workers over 1: {times[1] / times[2]:.2f}x   "
          f"(trdb w2 / numpy: {times[2] / numpy_s:.2f})")


if __name__ == "__main__":
    main()
