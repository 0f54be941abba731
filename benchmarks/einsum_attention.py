"""Graph attention EINSUM('nd,dh,nm,mf,fh->nm', X, Q, Adj, Y, K) with a block-sparse nm operand: trdb
against opt_einsum.contract over dense numpy arrays (the same data, zeros included).

Adj is n x m with tiles of `--tile`; a fraction `--density` of its tiles hold random values, the
others are zero and therefore absent in trdb. trdb's contraction order and tile sizes come from its
sparsity-aware cost (optimizer/einsum_order.py, optimizer/einsum_tiling.py), which should go
through Adj first (only its present tiles meet the others); dense opt_einsum computes the full
n x m product of the two projections. Every result is checked against numpy.

    python benchmarks/einsum_attention.py [--n 4096] [--d 64] [--h 64] [--tile 256] [--density 0.01]
"""
from __future__ import annotations

import argparse

import numpy as np
import opt_einsum
import threadpoolctl

import trdb
from timing import best_of, print_plans, print_ratios

SPEC = "nd,dh,nm,mf,fh->nm"
QUERY = f"SELECT * FROM EINSUM('{SPEC}', X, Q, Adj, Y, K)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096, help="n = m")
    parser.add_argument("--d", type=int, default=64, help="d = f")
    parser.add_argument("--h", type=int, default=64)
    parser.add_argument("--tile", type=int, default=256)
    parser.add_argument("--density", type=float, default=0.01, help="fraction of Adj's tiles present")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", default="1,2")
    args = parser.parse_args()
    n, d, h, t = args.n, args.d, args.h, args.tile
    for info in threadpoolctl.threadpool_info():
        print(f"# {info['internal_api']} {info.get('version')} threads={info['num_threads']}")
    rng = np.random.default_rng(0)
    X, Y = (rng.standard_normal((n, d), dtype=np.float32) for _ in range(2))
    Q, K = (rng.standard_normal((d, h), dtype=np.float32) for _ in range(2))
    grid = -(-n // t)
    present = rng.choice(grid * grid, size=max(1, round(args.density * grid * grid)), replace=False)
    Adj = np.zeros((n, n), dtype=np.float32)
    for p in present:
        i, j = divmod(int(p), grid)
        Adj[i * t:(i + 1) * t, j * t:(j + 1) * t] = rng.standard_normal((t, t), dtype=np.float32)
    expected = np.einsum(SPEC, *(a.astype(np.float64) for a in (X, Q, Adj, Y, K)), optimize=True)
    bound = 1e-4 * float(np.abs(expected).max())

    def check(name, result):
        error = float(np.abs(result - expected).max())
        if error > bound:
            raise SystemExit(f"{name}: wrong result (max abs error {error:.3g} > {bound:.3g})")

    times = {}
    dense = "opt_einsum.contract, dense"
    times[dense], result = best_of(args.repeats, lambda: opt_einsum.contract(SPEC, X, Q, Adj, Y, K))
    check(dense, result)
    con = trdb.connect()
    cur = con.cursor()
    cur.execute(f"CREATE TENSOR X FROM ? TILE ({t}, {d})", [X])
    cur.execute(f"CREATE TENSOR Y FROM ? TILE ({t}, {d})", [Y])
    cur.execute(f"CREATE TENSOR Q FROM ? TILE ({d}, {h})", [Q])
    cur.execute(f"CREATE TENSOR K FROM ? TILE ({d}, {h})", [K])
    cur.execute(f"CREATE TENSOR Adj FROM ? TILE ({t}, {t})", [Adj])
    stored = cur.execute("SELECT COUNT(*) FROM Adj").fetchone()[0]
    plans = {}
    for workers in args.workers.split(","):
        cur.execute(f"SET workers = {workers}")
        name = f"trdb, workers={workers}"
        times[name], result = best_of(args.repeats, lambda: cur.execute(QUERY).fetch_tensor(shape=(n, n)))
        check(name, result)
        plans[workers] = "\n".join(r[0] for r in cur.execute("EXPLAIN " + QUERY).fetchall())
    con.close()
    print(f"# '{SPEC}': n = m = {n}, d = f = {d}, h = {h}, float32; Adj tiles {t}x{t}: {stored} of "
          f"{grid * grid} present ({stored / (grid * grid):.2%}); best of {args.repeats}")
    print_ratios(times, dense, "/ dense opt_einsum")
    print_plans(plans)


if __name__ == "__main__":
    main()
