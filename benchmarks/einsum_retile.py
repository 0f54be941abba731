"""2048-square float32 matmul EINSUM('ij,jk->ik', A, B) with badly stored tiles: trdb against numpy.

A is stored with TILE (2048, 8) and B with TILE (8, 2048): left as they are, the join on j makes 256
outer products of 2048x2048 that the aggregate sums. trdb's tile choice (optimizer/einsum_tiling.py)
must retile them. Compared: numpy A @ B; trdb with its chosen tiling; trdb with the former rule
(each index takes the tiling of the largest operand: nothing retiled), run by binding with
`trdb.optimizer.einsum_decomposition.largest_operand_layout` in place of the cost-based choice, inside this script
only. Both run decomposed (dense_einsum_bytes = 0: operands this size would otherwise run as one
call on whole arrays). Every result is checked against numpy; EXPLAIN of the chosen plan is printed.

    python benchmarks/einsum_retile.py [--n 2048] [--thin 8] [--repeats 3] [--workers 1,2] [--no-former]
"""
from __future__ import annotations

import argparse
import contextlib

import numpy as np
import threadpoolctl

import trdb
from timing import best_of, check, print_plans, print_ratios
from trdb.optimizer import einsum_decomposition as einsum_binding

QUERY = "SELECT * FROM EINSUM('ij,jk->ik', A, B)"


@contextlib.contextmanager
def former_tile_rule():
    """Bind EINSUM with the former per-letter rule (largest operand's tiling) for this block only."""
    chosen = einsum_binding.choose_layout
    einsum_binding.choose_layout = einsum_binding.largest_operand_layout
    try:
        yield
    finally:
        einsum_binding.choose_layout = chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2048)
    parser.add_argument("--thin", type=int, default=8, help="the badly chosen tile size of the shared index")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--no-former", action="store_true", help="skip the (slow) former tile rule")
    args = parser.parse_args()
    n, thin = args.n, args.thin
    for info in threadpoolctl.threadpool_info():
        print(f"# {info['internal_api']} {info.get('version')} threads={info['num_threads']}")
    rng = np.random.default_rng(0)
    A, B = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    expected = A.astype(np.float64) @ B.astype(np.float64)
    times = {}
    times["numpy A @ B"], result = best_of(args.repeats, lambda: A @ B)
    check("numpy", result, expected)
    con = trdb.connect()
    cur = con.cursor()
    cur.execute("SET dense_einsum_bytes = 0")  # the decomposition's tiling is what this compares, not whole arrays
    cur.execute(f"CREATE TENSOR A FROM ? TILE ({n}, {thin})", [A])
    cur.execute(f"CREATE TENSOR B FROM ? TILE ({thin}, {n})", [B])
    plans = {}
    for workers in args.workers.split(","):
        cur.execute(f"SET workers = {workers}")
        name = f"trdb chosen tiles, workers={workers}"
        times[name], result = best_of(args.repeats, lambda: cur.execute(QUERY).fetch_tensor())
        check(name, result, expected)
        plans[workers] = "\n".join(r[0] for r in cur.execute("EXPLAIN " + QUERY).fetchall())
        if not args.no_former:
            name = f"trdb former rule (no retile), workers={workers}"
            with former_tile_rule():
                times[name], result = best_of(1, lambda: cur.execute(QUERY).fetch_tensor(), warmup=False)
            check(name, result, expected)
    con.close()
    print(f"# A {n}x{n} TILE ({n}, {thin}), B {n}x{n} TILE ({thin}, {n}), float32; best of {args.repeats} "
          f"(the former rule: one run)")
    print_ratios(times, "numpy A @ B", "/ numpy", width=46)
    print_plans(plans)


if __name__ == "__main__":
    main()
