"""Dense float32 matmul on a GPU: trdb's SQL form with `device = 'gpu'` against CuPy on the same data.

Two CuPy peers: `cupy (host in, host out)` copies A and B to the device, multiplies and copies the product
back, which is the work a trdb statement does (its buffer pool holds the decoded tiles in host memory and
`fetch_tensor` returns a numpy array); `cupy (on device)` multiplies arrays already on the device (the
bound no host-side engine reaches). Every result is checked against a float64 product. Needs CuPy and a
CUDA device.

    python benchmarks/gpu_matmul.py [--sizes 4096,8192] [--tile 2048] [--repeats 5]

Warm in every timed run: trdb's buffer pool (decoded input tiles) and plan cache, CuPy's kernel caches
and memory pool. The product is a query (nothing stored), so no run reuses another's work.
"""
from __future__ import annotations

import argparse

import numpy as np

import trdb
from timing import best_of_alternating, check, product_bound

QUERY = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"


def run_size(cupy, n: int, tile: int, repeats: int) -> list[str]:
    rng = np.random.default_rng(n)
    A, B = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    con = trdb.connect()
    con.execute("SET device = 'gpu'")
    con.execute(f"CREATE TENSOR A FROM ? TILE ({tile}, {tile})", [A])
    con.execute(f"CREATE TENSOR B FROM ? TILE ({tile}, {tile})", [B])
    dA, dB = cupy.asarray(A), cupy.asarray(B)

    def on_device():
        product = dA @ dB
        cupy.cuda.Device().synchronize()
        return product

    runs = {
        "cupy (on device)": on_device,
        "cupy (host in, host out)": lambda: cupy.asnumpy(cupy.asarray(A) @ cupy.asarray(B)),
        "trdb device=gpu": lambda: con.execute(QUERY).fetch_tensor(),
    }
    results = best_of_alternating(repeats, runs)
    expected, bound = A.astype(np.float64) @ B.astype(np.float64), product_bound(A, B)
    for name, (_, got) in results.items():
        check(name, cupy.asnumpy(got) if not isinstance(got, np.ndarray) else got, expected, bound)
    base = results["cupy (host in, host out)"][0]
    con.close()
    return [f"{n:>6} {tile:>5} {name:<26} {seconds:9.4f} {seconds / base:8.2f}"
            for name, (seconds, _) in results.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4096,8192")
    parser.add_argument("--tile", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import cupy  # the benchmark needs it; trdb itself imports it only when a statement runs on the GPU
    print(f"{'n':>6} {'tile':>5} {'run':<26} {'seconds':>9} {'ratio':>8}  (ratio to cupy host in, host out)")
    for n in (int(s) for s in args.sizes.split(",")):
        for line in run_size(cupy, n, args.tile, args.repeats):
            print(line)


if __name__ == "__main__":
    main()
