"""Non-negative matrix factorization steps (a relational auto-differentiation workload): queries/nnmf.sql's loss
`SUM(SUMSQ(V - W·H))` trained by `MINIMIZE nnmf_loss WRT (W, H) WITH (optimizer = 'adam', clamp_min = 0)`
against PyTorch (autograd, `torch.optim.Adam`, `clamp_(min=0)` on both factors after each step), and both
without the clamp; at 1 and at 2 threads each.

    python benchmarks/nnmf.py                         # 2048 x 2048 rank 64 and 4096 x 4096 rank 128
    python benchmarks/nnmf.py --sizes 4096:128 --steps 10 --rounds 9

V is W_true · H_true for non-negative factors (W_true half zeros), the starting W and H uniform in [0, 0.5):
the same float32 arrays for both systems. trdb stores V in tiles of `--tile` (default: half the side, so two
workers have tiles to share) in a database in memory; one round is one statement of `--steps` steps (each
committed, as MINIMIZE does) against the same number of PyTorch steps. Every step's loss is checked equal,
and the factors after the last round.

Each system runs in a child process of its own with its thread count fixed (benchmarks/turns.py); they take
turns, a round each, after a warm-up round. Printed: median seconds a step, the ratio of medians trdb /
PyTorch with the interval of the paired ratios' median, peak RSS. `--profile` adds a round, trdb's under
cProfile.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from turns import Child, add_turn_options, cores_used, ratio_text, seconds, serve, served_as_child, take_turns  # noqa: E402

QUERY_FILE = HERE.parent / "queries" / "nnmf.sql"
LEARNING_RATE = 0.05


def loss_view() -> str:
    """queries/nnmf.sql's CREATE VIEW nnmf_loss."""
    text = "\n".join(line for line in QUERY_FILE.read_text().splitlines() if not line.lstrip().startswith("--"))
    return next(s.strip() for s in text.split(";") if s.strip().startswith("CREATE OR REPLACE VIEW nnmf_loss"))


def make_data(folder: Path, n: int, rank: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    w_true = np.maximum(rng.standard_normal((n, rank)), 0)
    h_true = rng.uniform(0, 1, (rank, n))
    np.save(folder / "V.npy", (w_true @ h_true).astype(np.float32))
    np.save(folder / "W.npy", rng.uniform(0, 0.5, (n, rank)).astype(np.float32))
    np.save(folder / "H.npy", rng.uniform(0, 0.5, (rank, n)).astype(np.float32))


# --- the children -------------------------------------------------------------------------------------------

def trdb_setup(folder: Path, tile: int, threads: int, steps: int, clamp: bool):
    import trdb
    con = trdb.connect()
    rank = np.load(folder / "W.npy", mmap_mode="r").shape[1]
    con.execute(f"CREATE TENSOR V FROM '{folder / 'V.npy'}' TILE ({tile}, {tile})")
    con.execute(f"CREATE TENSOR W FROM '{folder / 'W.npy'}' TILE ({tile}, {rank})")
    con.execute(f"CREATE TENSOR H FROM '{folder / 'H.npy'}' TILE ({rank}, {tile})")
    con.execute(loss_view())
    con.execute(f"SET workers = {threads}")
    statement = (f"MINIMIZE nnmf_loss WRT (W, H) WITH (optimizer = 'adam', learning_rate = {LEARNING_RATE}, "
                 f"steps = {steps}{', clamp_min = 0' if clamp else ''})")
    return {"con": con, "statement": statement, "folder": folder}


def trdb_step(state) -> dict:
    return {"losses": [float(loss) for _, loss in state["con"].execute(state["statement"]).fetchall()]}


def trdb_finish(state) -> dict:
    for name in ("W", "H"):
        np.save(state["folder"] / f"trdb_{name}.npy", state["con"].execute(f"SELECT * FROM {name}").fetch_tensor())
    return {}


def torch_setup(folder: Path, threads: int, steps: int, clamp: bool):
    import torch
    torch.set_num_threads(threads)
    factors = [torch.tensor(np.load(folder / f"{name}.npy"), requires_grad=True) for name in ("W", "H")]
    return {"V": torch.from_numpy(np.load(folder / "V.npy")), "factors": factors, "steps": steps, "clamp": clamp,
            "optimizer": torch.optim.Adam(factors, lr=LEARNING_RATE), "folder": folder}


def torch_step(state) -> dict:
    import torch
    W, H = state["factors"]
    losses = []
    for _ in range(state["steps"]):
        state["optimizer"].zero_grad()
        loss = (state["V"] - W @ H).square().sum()
        loss.backward()
        state["optimizer"].step()
        if state["clamp"]:
            with torch.no_grad():
                W.clamp_(min=0)
                H.clamp_(min=0)
        losses.append(float(loss.detach()))
    return {"losses": losses}


def torch_finish(state) -> dict:
    for name, factor in zip(("W", "H"), state["factors"]):
        np.save(state["folder"] / f"torch_{name}.npy", factor.detach().numpy())
    return {}


def child(args: argparse.Namespace) -> None:
    folder = Path(args.data)
    __import__("trdb" if args.child == "trdb" else "torch")  # before serve() reads the RSS after imports
    if args.child == "trdb":
        serve(lambda: trdb_setup(folder, args.tile, args.threads, args.steps, args.clamp), trdb_step, trdb_finish)
    else:
        serve(lambda: torch_setup(folder, args.threads, args.steps, args.clamp), torch_step, torch_finish)


# --- the parent ---------------------------------------------------------------------------------------------

def measure(folder: Path, n: int, rank: int, threads: int, clamp: bool, args: argparse.Namespace) -> float:
    tile = args.tile or max(n // 2, 1)
    common = ["--data", str(folder), "--threads", str(threads), "--tile", str(tile), "--steps", str(args.steps)] + (
        ["--clamp"] if clamp else [])
    children = [Child(__file__, name, common, threads) for name in ("trdb", "torch")]
    replies = take_turns(children, args.rounds)
    if args.profile:
        children[0].call("profile")
        children[1].call("step")
    ends = {child.name: child.close() for child in children}
    losses = {name: [loss for reply in replies[name] for loss in reply["losses"]] for name in ("trdb", "torch")}
    difference = max(abs(a - b) / abs(b) for a, b in zip(losses["trdb"], losses["torch"]))
    assert difference <= 1e-3, f"step losses differ by {difference:.2g} (relative)"
    for name in ("W", "H"):
        ours, theirs = (np.load(folder / f"{who}_{name}.npy") for who in ("trdb", "torch"))
        gap = np.abs(ours - theirs)  # Adam: single entries may differ by 2 lr a step where a gradient is near 0
        assert gap.mean() <= 1e-3 * np.abs(theirs).mean(), f"{name}: mean difference {gap.mean():.2g}"
        assert not clamp or ours.min() >= 0, f"{name} has an entry below the clamp: {ours.min()}"
    times = {name: [t / args.steps for t in seconds(replies[name], args.rounds)] for name in ("trdb", "torch")}
    label = "with clamp_min = 0" if clamp else "without clamp"
    print(f"\n{n} x {n}, rank {rank}, tile {tile}, {label}, {threads} thread{'s' if threads > 1 else ''} each: "
          f"{len(losses['trdb'])} step losses equal ({losses['trdb'][0]:.4g} -> {losses['trdb'][-1]:.4g})")
    print(f"{'system':<8} {'median ms a step':>17} {'min ms':>8} {'cores':>6} {'peak RSS MB':>12}")
    for name in ("trdb", "torch"):
        print(f"{name:<8} {statistics.median(times[name]) * 1e3:17.2f} {min(times[name]) * 1e3:8.2f} "
              f"{cores_used(replies[name], args.rounds):6.2f} {ends[name]['peak_rss_mb']:12.0f}")
    print(f"trdb / torch: {ratio_text(times['trdb'], times['torch'])}")
    return statistics.median(times["trdb"]) / statistics.median(times["torch"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2048:64,4096:128", help="n:rank pairs, comma-separated")
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated; default 1,2")
    parser.add_argument("--steps", type=int, default=5, help="steps a round (one MINIMIZE statement); default 5")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds each, taking turns; default 7")
    parser.add_argument("--tile", type=int, default=0, help="trdb's tile of V; default half the side")
    add_turn_options(parser, "round")
    parser.add_argument("--clamp", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if served_as_child(args, child):
        return
    summary = []
    for size in args.sizes.split(","):
        n, rank = (int(x) for x in size.split(":"))
        with tempfile.TemporaryDirectory() as folder:
            make_data(Path(folder), n, rank, args.seed)
            for clamp in (True, False):
                for threads in [int(t) for t in args.threads.split(",")]:
                    summary.append((n, rank, clamp, threads, measure(Path(folder), n, rank, threads, clamp, args)))
    print(f"\n{'n':>5} {'rank':>4} {'clamp':>5} {'threads':>7} {'trdb / torch':>12}   (target: <= 0.6x)")
    for n, rank, clamp, threads, ratio in summary:
        print(f"{n:5d} {rank:4d} {'yes' if clamp else 'no':>5} {threads:7d} {ratio:11.2f}x")


if __name__ == "__main__":
    main()
