"""Forward plus backward of a 2-layer MLP: trdb's gradient queries against numpy and PyTorch (CPU).

X is 8192 x 1024, the hidden layer 1024 wide with ReLU, the output one column, the loss a scalar
sum of squares. trdb computes d loss / d W1 with `SELECT * FROM GRAD(loss, W1)` (a query that
includes the forward pass it needs); numpy (hand-written backward) and PyTorch (set_num_threads =
cores) compute the same gradients. Then one training step: MINIMIZE with SGD against numpy's
forward + backward + update, and against that step followed by saving W1 and W2 in an embedded DuckDB
database (MINIMIZE commits each step: the durable peer).

Fresh work only: a write to Y (untimed) comes before every timed GRAD, since a statement after
nothing changed reuses the previous one's forward pass; a MINIMIZE step writes W1 and W2 itself.
Warm in every timed run: trdb's buffer pool (the input tiles; the UPDATE keeps Y's new ones there; X and
W1 as whole arrays where the forward product runs on them, EXPLAIN's DenseEinsumExec: W1's is made
again after each MINIMIZE step writes it, inside the timed step), plan cache and kernel caches.

Results are checked against a float64 reference with float32 error bounds propagated through the
forward and backward pass (gamma(n) = n*u/(1-n*u) per product of length n): float32 sums over 8192
rows in another order (tiles, threads, PyTorch's kernels) differ by far less; where a pre-activation
lies within its float32 error of 0 the ReLU mask may go either way, and the bound allows both (one
such entry makes float32 numpy differ from float64 by 0.7% of max |dW1|: why a fixed 1e-3 x max
check failed against PyTorch).

    python benchmarks/mlp_training.py [--rows 8192] [--features 1024] [--hidden 1024] [--tile 2048]
        [--feature-tile F] [--hidden-tile H]     (finer tiles: --tile 1024 --feature-tile 512 --hidden-tile 512)
"""
from __future__ import annotations

import argparse
import os
import re

import numpy as np

import trdb
from timing import FLOAT32_UNIT_ROUNDOFF, SETTLE_SECONDS, alternating_runs, check, gamma, paired_summary

STEP = "MINIMIZE loss WRT (W1, W2) WITH (optimizer = 'sgd', learning_rate = {rate}, steps = {steps})"
TRAINING_STEPS = 10  # a training run: the steps of one MINIMIZE (planned once) against numpy's loop
RATE = 1e-6


def numpy_gradients(X, W1, W2, Y):
    H = np.maximum(X @ W1, 0)
    d_out = 2 * (H @ W2 - Y)
    d_hidden = (d_out @ W2.T) * (H > 0)
    return X.T @ d_hidden, H.T @ d_out


def numpy_step(X, W1, W2, Y, rate: float):
    g1, g2 = numpy_gradients(X, W1, W2, Y)
    W1 -= rate * g1
    W2 -= rate * g2


class DuckDBParameters:
    """The hand-glued peer of a durable training step: numpy's step, then W1 and W2 saved in an embedded
    DuckDB database in one transaction (each a table of its bytes, replaced), as a script that keeps its
    parameters in a database would. MINIMIZE commits every step (its rows and statistics, in the same
    embedded DuckDB); this peer shows what that commit costs outside trdb."""

    def __init__(self) -> None:
        import duckdb

        self.con = duckdb.connect()

    def save(self, **params: np.ndarray) -> None:
        self.con.execute("BEGIN")
        for name, value in params.items():
            self.con.execute(f"CREATE OR REPLACE TABLE {name} (rows BIGINT, cols BIGINT, v BLOB)")
            self.con.execute(f"INSERT INTO {name} VALUES (?, ?, ?)", [*value.shape, value.tobytes()])
        self.con.execute("COMMIT")

    def load(self, name: str, dtype) -> np.ndarray:
        rows, cols, blob = self.con.execute(f"SELECT rows, cols, v FROM {name}").fetchone()
        return np.frombuffer(blob, dtype=dtype).reshape(rows, cols)


def numpy_flops(rows: int, features: int, hidden: int) -> int:
    """FLOPs of numpy_gradients' dW1 part (2*m*n*k a product, one an elementwise operation)."""
    forward = 2 * rows * features * hidden + rows * hidden + 2 * rows * hidden + 2 * rows
    backward = 2 * rows * hidden + 2 * rows * hidden + 2 * rows * features * hidden
    return forward + backward


def reference(X, W1, W2, Y):
    """float64 gradients and elementwise bounds on a float32 computation's error, in any summation order."""
    X, W1, W2, Y = (a.astype(np.float64) for a in (X, W1, W2, Y))
    aX, aW2 = np.abs(X), np.abs(W2)
    rows, features = X.shape
    Z = X @ W1
    eZ = gamma(features) * (aX @ np.abs(W1))          # |Z32 - Z|; also bounds |H32 - H| (ReLU is 1-Lipschitz)
    H = np.maximum(Z, 0)
    out = H @ W2
    e_out = gamma(W1.shape[1]) * ((H + eZ) @ aW2) + eZ @ aW2
    D = 2 * (out - Y)
    eD = 2 * e_out + gamma(2) * 2 * (np.abs(out) + np.abs(Y))
    G = D @ W2.T
    eG = eD @ aW2.T + gamma(1) * np.abs(G)
    uncertain = np.abs(Z) <= eZ                       # the float32 mask may differ from float64's here
    d_hidden = G * (Z > 0)
    e_hidden = eG + uncertain * (np.abs(G) + eG)
    dW1 = X.T @ d_hidden
    e1 = gamma(rows) * (aX.T @ (np.abs(d_hidden) + e_hidden)) + aX.T @ e_hidden
    dW2 = H.T @ D
    e2 = gamma(rows) * ((H + eZ).T @ (np.abs(D) + eD)) + eZ.T @ np.abs(D) + H.T @ eD
    return (dW1, dW2), (e1, e2), int(uncertain.sum())


def torch_gradients(X, W1, W2, Y):
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    x, y = torch.from_numpy(X), torch.from_numpy(Y)
    w1, w2 = torch.from_numpy(W1.copy()).requires_grad_(), torch.from_numpy(W2.copy()).requires_grad_()

    def run():
        w1.grad = w2.grad = None
        loss = ((torch.relu(x @ w1) @ w2 - y) ** 2).sum()
        loss.backward()
        return w1.grad.numpy(), w2.grad.numpy()
    return run


def executed_flops(cur, query: str) -> int:
    lines = [row[0] for row in cur.execute("EXPLAIN ANALYZE " + query).fetchall()]
    (line,) = [line for line in lines if line.startswith("Executed work:")]
    return int(re.search(r"flops=\S+ \((\d+)\)", line).group(1))


def load(cur, X, W1, W2, Y, tile: int, feature_tile: int, hidden_tile: int) -> None:
    for name, value, tiles in (("X", X, (tile, feature_tile)), ("W1", W1, (feature_tile, hidden_tile)),
                               ("W2", W2, (hidden_tile, 1)), ("Y", Y, (tile, 1))):
        cur.execute(f"DROP TENSOR IF EXISTS {name}")
        cur.execute(f"CREATE TENSOR {name} FROM ? TILE {tiles}", [value])


def create_views(cur) -> None:
    cur.execute("CREATE VIEW hidden AS SELECT X.i, W1.j, RELU(SUM(MATMUL(X.v, W1.v))) AS v FROM X JOIN W1 "
                "ON X.j = W1.i GROUP BY X.i, W1.j")
    cur.execute("CREATE VIEW output AS SELECT h.i, W2.j, SUM(MATMUL(h.v, W2.v)) AS v FROM hidden AS h JOIN W2 "
                "ON h.j = W2.i GROUP BY h.i, W2.j")
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(o.v - Y.v)) AS v FROM output AS o JOIN Y "
                "ON o.i = Y.i AND o.j = Y.j")


def check_step(cur, X, W1, W2, Y, bounds, grads) -> None:
    """One MINIMIZE step from the initial weights moves them by -rate * gradient, within float32 error."""
    cur.execute(STEP.format(rate=RATE, steps=1)).fetchall()
    for name, start, grad, bound in (("W1", W1, grads[0], bounds[0]), ("W2", W2, grads[1], bounds[1])):
        got = cur.execute(f"SELECT * FROM {name}").fetch_tensor()
        expected = start.astype(np.float64) - RATE * grad
        check(f"MINIMIZE step {name}", got, expected, RATE * (bound + gamma(2) * np.abs(grad))
              + 2 * FLOAT32_UNIT_ROUNDOFF * np.abs(expected))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--features", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--tile", type=int, default=2048, help="row tile of X and Y")
    parser.add_argument("--feature-tile", type=int, default=None, help="column tile of X (default: whole)")
    parser.add_argument("--hidden-tile", type=int, default=None, help="column tile of W1 (default: whole)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.rows, args.features), dtype=np.float32)
    W1 = (rng.standard_normal((args.features, args.hidden)) / np.sqrt(args.features)).astype(np.float32)
    W2 = (rng.standard_normal((args.hidden, 1)) / np.sqrt(args.hidden)).astype(np.float32)
    Y = rng.standard_normal((args.rows, 1), dtype=np.float32)
    grads64, bounds, uncertain = reference(X, W1, W2, Y)

    con = trdb.connect()
    cur = con.cursor()
    load(cur, X, W1, W2, Y, args.tile, args.feature_tile or args.features, args.hidden_tile or args.hidden)
    create_views(cur)
    write = lambda: cur.execute("UPDATE Y SET v = Y.v * 1")  # noqa: E731  (drops the carried forward pass)
    grad_w1 = lambda: cur.execute("SELECT * FROM GRAD(loss, W1)").fetch_tensor()  # noqa: E731
    both = lambda: tuple(cur.execute(f"SELECT * FROM GRAD(loss, {w})").fetch_tensor() for w in ("W1", "W2"))  # noqa: E731
    runs = {"numpy dW1, dW2": lambda: numpy_gradients(X, W1, W2, Y),
            "trdb GRAD W1": lambda: (grad_w1(), grads64[1]), "trdb GRAD W1, GRAD W2": both}
    try:
        runs["pytorch dW1, dW2"] = torch_gradients(X, W1, W2, Y)
    except ImportError:
        print("# PyTorch is not installed: skipped")
    rounds = alternating_runs(args.repeats, runs, before={"trdb GRAD W1": write, "trdb GRAD W1, GRAD W2": write})
    timings = {name: (min(times), result) for name, (times, result) in rounds.items()}
    for name, (_, got) in timings.items():
        for n, (value, want, bound) in enumerate(zip(got, grads64, bounds), 1):
            check(f"{name}: dW{n}", value, want, bound)
    write()
    flops = executed_flops(cur, "SELECT * FROM GRAD(loss, W1)")
    check_step(cur, X, W1, W2, Y, bounds, grads64)

    print(f"# X {args.rows}x{args.features} in tiles {args.tile}x{args.feature_tile or args.features}, hidden "
          f"{args.hidden} (W1 tile {args.feature_tile or args.features}x{args.hidden_tile or args.hidden}); "
          f"best of {args.repeats} after a warm-up, systems taking turns")
    print(f"# checked against float64 with float32 bounds ({uncertain} pre-activations within float32 error of 0)")
    print("# warm: buffer pool (the write keeps Y's new tiles there too; X and W1 as whole arrays where the forward "
          "product runs on them, W1's made again within each MINIMIZE step), plan cache; a write before every timed "
          "GRAD drops the carried forward pass; "
          f"a {SETTLE_SECONDS} s pause before each timed run lets the previous run's BLAS threads sleep")
    base = timings["numpy dW1, dW2"][0]
    print("# paired: the ratios of runs made in the same round; [a-b at c%]: the interval that holds their median "
          "with that probability (timing.median_interval)")
    print(f"{'':24s} {'best':>8s}  {'best/numpy':>10s}  paired ratios to numpy")
    for name, (seconds, _) in timings.items():
        print(f"{name:24s} {seconds:8.3f}s {seconds / base:10.2f}x  "
              f"{paired_summary(rounds[name][0], rounds['numpy dW1, dW2'][0])}")
    expected = numpy_flops(args.rows, args.features, args.hidden)
    print(f"executed FLOPs of GRAD(loss, W1): trdb {flops / 1e9:.3f} G, numpy {expected / 1e9:.3f} G, "
          f"ratio {flops / expected:.4f}")
    # one training step: forward, both gradients (sharing the forward pass) and the SGD update
    W1n, W2n = W1.copy(), W2.copy()
    W1d, W2d, saved = W1.copy(), W2.copy(), DuckDBParameters()

    def durable_step() -> None:
        numpy_step(X, W1d, W2d, Y, RATE)
        saved.save(W1=W1d, W2=W2d)
    for steps in (1, TRAINING_STEPS):
        minimize = STEP.format(rate=RATE, steps=steps)
        trained = alternating_runs(args.repeats if steps == 1 else max(2, args.repeats // 2),
                                  {"trdb": lambda: cur.execute(minimize).fetchall(),
                                   "numpy": lambda: [numpy_step(X, W1n, W2n, Y, RATE) for _ in range(steps)],
                                   "numpy+duckdb": lambda: [durable_step() for _ in range(steps)]})
        trdb_step, numpy_s, durable_s = (min(trained[n][0]) / steps for n in ("trdb", "numpy", "numpy+duckdb"))
        what = "one MINIMIZE statement of 1 step" if steps == 1 else f"one MINIMIZE of {steps} steps, per step"
        print(f"training, {what}: trdb {trdb_step:.3f} s, numpy fwd+bwd+update {numpy_s:.3f} s, "
              f"trdb / numpy = {trdb_step / numpy_s:.2f} (paired: "
              f"{paired_summary(trained['trdb'][0], trained['numpy'][0])}); "
              f"numpy + the parameters saved in DuckDB each step {durable_s:.3f} s, trdb / that = "
              f"{trdb_step / durable_s:.2f} (paired: {paired_summary(trained['trdb'][0], trained['numpy+duckdb'][0])})")
    for name, want in (("W1", W1d), ("W2", W2d)):  # the peer saved what it computed
        check(f"DuckDB-saved {name}", saved.load(name, want.dtype), want.astype(np.float64), 0.0)

if __name__ == "__main__":
    main()
