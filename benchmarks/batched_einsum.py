"""Attention's batched contractions on one tile: trdb's batched GEMM (kernels/batched_einsum.py) against
numpy's einsum without and with optimize, and trdb's einsum kernel (functions.einsum) as it dispatches.

The two EINSUMs of one attention head group, Q and K in (sequence, heads, head dim) layout:
`shk,thk->hst` (scores) and `hst,thk->hsk` (weights times values). h is a batch letter (in both
operands and the output): numpy's plain einsum runs such a spec in its C loop. Two sizes: sequence
256, model dimension 512, 8 heads; sequence 512, dimension 1024, 16 heads (head dimension 64),
float32. Every result is checked against a float64 numpy reference.

    python benchmarks/batched_einsum.py [--repeats 7]
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import threadpoolctl

from timing import best_of_alternating, check, print_ratios
from trdb.kernels import functions
from trdb.kernels.batched_einsum import blas_einsum

SIZES = [(256, 512, 8), (512, 1024, 16)]  # (sequence, model dimension, heads)
SPECS = ["shk,thk->hst", "hst,thk->hsk"]


def operands(spec: str, seq: int, heads: int, head_dim: int, rng) -> tuple:
    q = rng.standard_normal((seq, heads, head_dim), dtype=np.float32)
    k = rng.standard_normal((seq, heads, head_dim), dtype=np.float32)
    if spec == "shk,thk->hst":
        return q, k
    scores = np.einsum("shk,thk->hst", q, k, optimize=True) / np.float32(np.sqrt(head_dim))
    weights = np.exp(scores - scores.max(axis=2, keepdims=True))
    return (weights / weights.sum(axis=2, keepdims=True)).astype(np.float32), k


def compare(spec: str, seq: int, dim: int, heads: int, repeats: int) -> None:
    a, b = operands(spec, seq, heads, dim // heads, np.random.default_rng(0))
    expected = np.einsum(spec, a.astype(np.float64), b.astype(np.float64), optimize=True)
    runs = {
        "batched GEMM (blas_einsum)": lambda: blas_einsum(np, spec, a, b),
        "np.einsum(optimize=False)": lambda: np.einsum(spec, a, b, optimize=False),
        "np.einsum(optimize=True)": lambda: np.einsum(spec, a, b, optimize=True),
        "trdb functions.einsum": lambda: functions.einsum(np, spec, a, b),
    }
    results = best_of_alternating(repeats, runs)
    for name, (_, result) in results.items():
        check(name, result, expected)
    print(f"\n# '{spec}': sequence {seq}, dimension {dim}, {heads} heads of {dim // heads}, float32; "
          f"best of {repeats}")
    print_ratios({name: seconds for name, (seconds, _) in results.items()}, "batched GEMM (blas_einsum)",
                 "/ batched GEMM", width=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    for info in threadpoolctl.threadpool_info():
        print(f"# {info['internal_api']} {info.get('version')} threads={info['num_threads']}")
    print("# " + " ".join(f"{k}={v}" for k, v in os.environ.items() if k.startswith("OPENBLAS_")))
    for seq, dim, heads in SIZES:
        for spec in SPECS:
            compare(spec, seq, dim, heads, args.repeats)


if __name__ == "__main__":
    main()
