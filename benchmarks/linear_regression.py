"""A linear regression trained step by step over many small tuples (one row of features a tuple, `TILE (1, d)`):
SGD steps of MINIMIZE against PyTorch's (autograd, `torch.optim.SGD`) and numpy's (the gradient written by hand)
on the same rows, from the same zero weights, at more than one size.

    python benchmarks/linear_regression.py [--rows 20000 200000] [--widths 8 64] [--steps 20] [--repeats 3]

The loss is `SUM(SUMSQ(MATMUL(X.v, W.v) - Y.v)) / n` over X JOIN W JOIN Y, the weights W one tile: 8 x 1 for rows of
8 features and one target, 64 x 64 for rows of 64 and as many targets (a linear layer, whose gradient over the rows
sums each row's 64 x 64 outer product). Each
repeat starts from zero weights again (trdb: W written afresh; PyTorch and numpy: new arrays), and every step
moves the weights, so no run reuses the one before. The three take turns; medians of the time a step are compared
(trdb / peer), and the final losses are checked equal.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import trdb

try:
    import torch
except ImportError:
    torch = None

LEARNING_RATE = 0.1


def data(rows: int, width: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    outputs = 1 if width == 8 else width
    x = rng.standard_normal((rows, width)).astype(np.float32)
    y = (x @ rng.standard_normal((width, outputs)) / np.sqrt(width) +
         0.1 * rng.standard_normal((rows, outputs))).astype(np.float32)
    return x, y


def trdb_model(x: np.ndarray, y: np.ndarray):
    con = trdb.connect()
    width, outputs = x.shape[1], y.shape[1]
    con.execute(f"CREATE TENSOR X FROM ? TILE (1, {width})", [x])
    con.execute(f"CREATE TENSOR Y FROM ? TILE (1, {outputs})", [y])
    con.execute(f"CREATE TENSOR W SHAPE ({width}, {outputs}) TILE ({width}, {outputs}) FILL ZEROS")
    con.execute(f"CREATE VIEW loss AS SELECT SUM(SUMSQ(MATMUL(X.v, W.v) - Y.v)) / {len(x)} AS v "
                "FROM X JOIN W ON X.j = W.i JOIN Y ON Y.i = X.i")
    return con


def run_trdb(con, steps: int, shape: tuple[int, int]) -> tuple[float, float]:
    con.execute(f"CREATE OR REPLACE TENSOR W SHAPE {shape} TILE {shape} FILL ZEROS")
    started = time.perf_counter()
    rows = con.execute(f"MINIMIZE loss WRT (W) WITH (optimizer = 'sgd', learning_rate = {LEARNING_RATE}, "
                       f"steps = {steps})").fetchall()
    return (time.perf_counter() - started) / steps, float(rows[-1][1])


def run_torch(x: np.ndarray, y: np.ndarray, steps: int) -> tuple[float, float]:
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    w = torch.zeros((x.shape[1], y.shape[1]), requires_grad=True)
    optimizer = torch.optim.SGD([w], lr=LEARNING_RATE)
    started = time.perf_counter()
    for _ in range(steps):
        optimizer.zero_grad()
        loss = ((xt @ w - yt) ** 2).sum() / len(x)
        loss.backward()
        optimizer.step()
    return (time.perf_counter() - started) / steps, float(loss.detach())


def run_numpy(x: np.ndarray, y: np.ndarray, steps: int) -> tuple[float, float]:
    w = np.zeros((x.shape[1], y.shape[1]), np.float32)
    started = time.perf_counter()
    for _ in range(steps):
        residual = x @ w - y
        loss = float((residual.astype(np.float64) ** 2).sum()) / len(x)
        w -= np.float32(LEARNING_RATE) * (2 / len(x)) * (x.T @ residual)
    return (time.perf_counter() - started) / steps, loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[20_000, 200_000])
    parser.add_argument("--widths", type=int, nargs="+", default=[8, 64], help="features a row: 8 (one target) or more")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if torch is not None:
        torch.set_num_threads(2)
    print(f"{'rows':>9} {'width':>5} {'trdb ms':>8} {'numpy ms':>9} {'torch ms':>9} {'/numpy':>7} {'/torch':>7}   final loss")
    for width, rows in ((w, r) for w in args.widths for r in args.rows):
        x, y = data(rows, width)
        con = trdb_model(x, y)
        shape = (width, y.shape[1])
        runs = {"trdb": lambda: run_trdb(con, args.steps, shape), "numpy": lambda: run_numpy(x, y, args.steps)}
        if torch is not None:
            runs["torch"] = lambda: run_torch(x, y, args.steps)
        times: dict[str, list] = {name: [] for name in runs}
        losses: dict[str, float] = {}
        for _ in range(args.repeats):  # taking turns
            for name, run in runs.items():
                elapsed, losses[name] = run()
                times[name].append(elapsed)
        con.close()
        med = {k: statistics.median(v) * 1e3 for k, v in times.items() if v}
        theirs = f"{med['torch']:9.2f}" if "torch" in med else f"{'-':>9}"
        ratio = f"{med['trdb'] / med['torch']:6.1f}x" if "torch" in med else f"{'-':>7}"
        print(f"{rows:9,} {width:5} {med['trdb']:8.2f} {med['numpy']:9.2f} {theirs} {med['trdb'] / med['numpy']:6.1f}x {ratio}"
              f"   {losses['trdb']:.6f} (numpy {losses['numpy']:.6f})")
        for name, loss in losses.items():
            assert abs(loss - losses["numpy"]) <= 1e-3 * max(1.0, abs(losses["numpy"])), (name, loss, losses)


if __name__ == "__main__":
    main()
