"""The digits MLP (64-64-10, ReLU, softmax cross-entropy, 1,437 training images of 8 x 8, full batch): 200 Adam
steps of MINIMIZE, each committed to a database file, against PyTorch's 200 steps (`torch.optim.Adam`, float32)
from the same initial weights; the final losses and test accuracies are printed side by side (checked close).

    python benchmarks/digits_mlp.py [--steps 200] [--repeats 3] [--commit-every 1]

The model is queries/digits_mlp.sql's. Each repeat starts from the initial weights again (trdb: the weights
and Adam's state written afresh; PyTorch: a new model and optimizer); trdb and PyTorch take turns, and the
medians are compared (trdb / PyTorch). Without PyTorch only trdb's time is printed.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import trdb

try:
    import torch
except ImportError:
    torch = None

DATA = Path(__file__).parent.parent / "queries" / "data"
SETUP = Path(__file__).parent.parent / "queries" / "digits_mlp.sql"


def model_statements() -> list[str]:
    """queries/digits_mlp.sql up to (not including) its MINIMIZE: the data, the weights and the views."""
    text = SETUP.read_text().split("MINIMIZE")[0]
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def numpy_inputs():
    x = np.load(DATA / "digits_train_pixels.npy").astype(np.float32) / 16
    y = np.load(DATA / "digits_train_onehot.npy").argmax(axis=1)
    tx = np.load(DATA / "digits_test_pixels.npy").astype(np.float32) / 16
    ty = np.load(DATA / "digits_test_onehot.npy").argmax(axis=1)
    return x, y, tx, ty


def run_trdb(con, steps: int, initial: dict, commit_every: int = 1) -> tuple[float, float, float]:
    for name, value in initial.items():  # the initial weights again; Adam's state goes with the old tensors
        tile = ", ".join(map(str, value.shape))
        con.execute(f"CREATE OR REPLACE TENSOR {name} FROM ? TILE ({tile}) DTYPE float32", [value])
    started = time.perf_counter()
    rows = con.execute(f"MINIMIZE loss WRT (W1, b1, W2, b2) WITH (optimizer = 'adam', learning_rate = 0.01, "
                       f"steps = {steps}, commit_every = {commit_every})").fetchall()
    elapsed = time.perf_counter() - started
    weights = {n: con.execute(f"SELECT * FROM {n}").fetch_tensor() for n in initial}
    return elapsed, rows[-1][1], weights


def run_torch(x, y, steps: int, initial: dict):
    torch.set_num_threads(2)
    params = {n: torch.tensor(v, requires_grad=True) for n, v in initial.items()}
    optimizer = torch.optim.Adam(params.values(), lr=0.01)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    started = time.perf_counter()
    for _ in range(steps):
        optimizer.zero_grad()
        hidden = torch.relu(xt @ params["W1"] + params["b1"])
        loss = torch.nn.functional.cross_entropy(hidden @ params["W2"] + params["b2"], yt)
        loss.backward()
        optimizer.step()
    elapsed = time.perf_counter() - started
    return elapsed, float(loss), {n: p.detach().numpy() for n, p in params.items()}


def accuracy(weights: dict, x, y) -> float:
    hidden = np.maximum(x @ weights["W1"] + weights["b1"], 0)
    return float(((hidden @ weights["W2"] + weights["b2"]).argmax(axis=1) == y).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--commit-every", type=int, default=1, help="MINIMIZE's commit_every (1: each step commits)")
    args = parser.parse_args()
    x, y, tx, ty = numpy_inputs()
    with tempfile.TemporaryDirectory() as folder:
        con = trdb.connect(str(Path(folder) / "digits.trdb"))
        for statement in model_statements():
            con.execute(statement)
        initial = {n: con.execute(f"SELECT * FROM {n}").fetch_tensor() for n in ("W1", "b1", "W2", "b2")}
        times: dict[str, list] = {"trdb": [], "torch": []}
        for _ in range(args.repeats):
            elapsed, trdb_loss, trdb_weights = run_trdb(con, args.steps, initial, args.commit_every)
            times["trdb"].append(elapsed)
            if torch is not None:
                elapsed, torch_loss, torch_weights = run_torch(x, y, args.steps, initial)
                times["torch"].append(elapsed)
        con.close()
    ours = statistics.median(times["trdb"])
    print(f"digits MLP 64-64-10, {args.steps} Adam steps, full batch of {len(x)}")
    committed = "each step" if args.commit_every == 1 else f"every {args.commit_every} steps"
    print(f"trdb ({committed} committed to a file): {ours:.3f} s ({ours / args.steps * 1e3:.1f} ms a step), "
          f"final loss {trdb_loss:.5f}, test accuracy {accuracy(trdb_weights, tx, ty):.4f}")
    if torch is None:
        print("(PyTorch is not installed: no comparison)")
        return
    theirs = statistics.median(times["torch"])
    print(f"PyTorch (float32, 2 threads):         {theirs:.3f} s ({theirs / args.steps * 1e3:.1f} ms a step), "
          f"final loss {torch_loss:.5f}, test accuracy {accuracy(torch_weights, tx, ty):.4f}")
    print(f"ratio trdb / PyTorch: {ours / theirs:.1f}x")
    assert abs(trdb_loss - torch_loss) <= 0.05 * max(abs(torch_loss), 1e-3) + 1e-4, (trdb_loss, torch_loss)


if __name__ == "__main__":
    main()
