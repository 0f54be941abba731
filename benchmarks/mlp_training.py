"""Forward plus backward of a 2-layer MLP: trdb's gradient queries against PyTorch (CPU) and numpy.

X is 8192 x 1024, the hidden layer 1024 wide with ReLU, the output one column, the loss a scalar
sum of squares. trdb computes d loss / d W1 and d loss / d W2 with `SELECT * FROM GRAD(loss, W)`
(each a query that includes the forward pass it needs; the second reuses the forward pass the first
computed, and a write before each timed pair makes the first compute it afresh); PyTorch (torch.set_num_threads = cores)
and numpy (hand-written backward) compute the same gradients, which are compared.

    python benchmarks/mlp_training.py [--rows 8192] [--features 1024] [--hidden 1024] [--tile 2048]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

import trdb
from timing import best_of


def numpy_gradients(X, W1, W2, Y):
    H = np.maximum(X @ W1, 0)
    d_out = 2 * (H @ W2 - Y)
    d_hidden = (d_out @ W2.T) * (H > 0)
    return X.T @ d_hidden, H.T @ d_out


def torch_gradients(X, W1, W2, Y):
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    x, y = torch.from_numpy(X), torch.from_numpy(Y)
    w1, w2 = torch.from_numpy(W1).requires_grad_(), torch.from_numpy(W2).requires_grad_()

    def run():
        w1.grad = w2.grad = None
        loss = ((torch.relu(x @ w1) @ w2 - y) ** 2).sum()
        loss.backward()
        return w1.grad.numpy(), w2.grad.numpy()
    run.params = (w1, w2)
    return run


def torch_step(X, W1, W2, Y, rate: float):
    import torch

    forward_backward = torch_gradients(X, W1.copy(), W2.copy(), Y)

    def run():
        g1, g2 = forward_backward()
        with torch.no_grad():  # the SGD update, as MINIMIZE does it
            for param, grad in zip(forward_backward.params, (g1, g2)):
                param -= rate * torch.from_numpy(grad)
    return run


def best_timed(repeats: int, timed) -> tuple[float, object]:
    """The best of `repeats` runs of `timed()`, which returns (its own measured seconds, result)."""
    timed()  # warm-up
    runs = [timed() for _ in range(repeats)]
    return min(seconds for seconds, _ in runs), runs[-1][1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--features", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--tile", type=int, default=2048, help="row tile of X (W1 is one tile)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.rows, args.features), dtype=np.float32)
    W1 = (rng.standard_normal((args.features, args.hidden)) / np.sqrt(args.features)).astype(np.float32)
    W2 = (rng.standard_normal((args.hidden, 1)) / np.sqrt(args.hidden)).astype(np.float32)
    Y = rng.standard_normal((args.rows, 1), dtype=np.float32)

    con = trdb.connect()
    cur = con.cursor()
    cur.execute(f"CREATE TENSOR X FROM ? TILE ({args.tile}, {args.features})", [X])
    cur.execute(f"CREATE TENSOR W1 FROM ? TILE ({args.features}, {args.hidden})", [W1])
    cur.execute(f"CREATE TENSOR W2 FROM ? TILE ({args.hidden}, 1)", [W2])
    cur.execute(f"CREATE TENSOR Y FROM ? TILE ({args.tile}, 1)", [Y])
    cur.execute("CREATE VIEW hidden AS SELECT X.i, W1.j, RELU(SUM(MATMUL(X.v, W1.v))) AS v FROM X JOIN W1 "
                "ON X.j = W1.i GROUP BY X.i, W1.j")
    cur.execute("CREATE VIEW output AS SELECT h.i, W2.j, SUM(MATMUL(h.v, W2.v)) AS v FROM hidden AS h JOIN W2 "
                "ON h.j = W2.i GROUP BY h.i, W2.j")
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(o.v - Y.v)) AS v FROM output AS o JOIN Y "
                "ON o.i = Y.i AND o.j = Y.j")

    def trdb_gradients():
        return tuple(cur.execute(f"SELECT * FROM GRAD(loss, {w})").fetch_tensor() for w in ("W1", "W2"))

    def after_a_write(run):
        # The second GRAD reuses the forward pass the first one computed (the session keeps the last
        # statement's shared subplans while nothing changes). Before each timed run a write to Y
        # (untimed) makes the first GRAD compute it afresh, as after a training step's update.
        def timed():
            cur.execute("UPDATE Y SET v = Y.v * 1")
            started = time.perf_counter()
            result = run()
            return time.perf_counter() - started, result
        return timed

    timings = {"numpy": best_of(args.repeats, lambda: numpy_gradients(X, W1, W2, Y)),
               "trdb": best_timed(args.repeats, after_a_write(trdb_gradients))}
    try:
        timings["pytorch"] = best_of(args.repeats, torch_gradients(X, W1, W2, Y))
    except ImportError:
        print("# PyTorch is not installed (pip install torch==2.13.0): skipped")
    reference = timings["numpy"][1]
    for name, (_, grads) in timings.items():
        for got, want in zip(grads, reference):
            scale = float(np.abs(want).max())
            assert np.abs(got - want).max() <= 1e-3 * scale, f"{name}: gradients differ from numpy's"
    print(f"# X {args.rows}x{args.features}, hidden {args.hidden}, tile {args.tile}; best of {args.repeats}")
    for name, (seconds, _) in timings.items():
        print(f"{name:8s} {seconds:8.3f} s")
    if "pytorch" in timings:
        print(f"trdb / pytorch = {timings['trdb'][0] / timings['pytorch'][0]:.2f}")
    print(f"trdb / numpy   = {timings['trdb'][0] / timings['numpy'][0]:.2f}")
    # one training step: forward, both gradients (sharing the forward pass) and the SGD update
    step = "MINIMIZE loss WRT (W1, W2) WITH (optimizer = 'sgd', learning_rate = 0.000001, steps = 1)"
    trdb_step = best_of(args.repeats, lambda: cur.execute(step).fetchall())[0]
    print(f"training step: trdb MINIMIZE {trdb_step:.3f} s", end="")
    if "pytorch" in timings:
        torch_s = best_of(args.repeats, torch_step(X, W1, W2, Y, 1e-6))[0]
        print(f", pytorch {torch_s:.3f} s, trdb / pytorch = {trdb_step / torch_s:.2f}")
    else:
        print()


if __name__ == "__main__":
    main()
