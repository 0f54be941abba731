"""A 2-layer GCN epoch (relational auto-differentiation's workload): one Adam step of queries/gcn.sql's model
(`MINIMIZE gcn_loss WRT (W1, W2) WITH (optimizer = 'adam', steps = 1)`) against PyTorch (`torch.sparse.mm`,
autograd, `torch.optim.Adam`, `F.cross_entropy` on the training nodes), at 1 and at 2 threads each, with the
peak resident memory of each.

    python benchmarks/gcn.py                          # Cora's size and ogbn-arxiv's
    python benchmarks/gcn.py --sizes cora --rounds 9

Sizes: `cora` (2,708 nodes, 5,278 edges, 1,433 -> 16 -> 7, 140 training nodes) and `arxiv` (169,343 nodes,
1,166,243 edges, 128 -> 256 -> 40, 90,941 training nodes, as ogbn-arxiv). The graph is random with a power-law
degree distribution (benchmarks/load_graph.py's `power_law_graph`), made symmetric with self-loops and
normalized, Â = D^-1/2 (A + I) D^-1/2; features are standard normal, labels uniform, weights Glorot-uniform:
the same arrays for both systems, written once to files. trdb reads them as a user would (`FROM COO` of the
Parquet edge list into CSR tiles of `--tile`, `FROM 'X.npy'`) into a database file and runs the views of
queries/gcn.sql; PyTorch holds Â as a sparse COO tensor (`--torch-sparse csr` for CSR; both with `all`).

Each system runs in a child process of its own (benchmarks/turns.py), with its threads fixed before it
starts: OpenBLAS/OpenMP threads, `torch.set_num_threads`, trdb's `workers`. They take turns, one epoch each
a round, after a warm-up round; every epoch's loss is checked equal (each system steps the same weights the
same way) and the weights after the last one too. Printed: each system's median seconds an epoch, the ratio
of medians trdb / PyTorch with the interval of the paired ratios' median, and each child's peak RSS (and its
RSS after its imports, before any data). `--profile` adds one more epoch, trdb's under cProfile.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from turns import Child, add_turn_options, cores_used, ratio_text, seconds, serve, served_as_child, take_turns  # noqa: E402

QUERY_FILE = HERE.parent / "queries" / "gcn.sql"
STEP = "MINIMIZE gcn_loss WRT (W1, W2) WITH (optimizer = 'adam', learning_rate = 0.01, steps = 1)"
SIZES = {"cora": {"nodes": 2_708, "edges": 5_278, "features": 1_433, "hidden": 16, "classes": 7,
                  "train": 140, "tile": 2_708},
         "arxiv": {"nodes": 169_343, "edges": 1_166_243, "features": 128, "hidden": 256, "classes": 40,
                   "train": 90_941, "tile": 21_168}}


def model_statements() -> list[str]:
    """The views of queries/gcn.sql that make the model (gcn_hidden, gcn_logits, gcn_loss)."""
    text = "\n".join(line for line in QUERY_FILE.read_text().splitlines() if not line.lstrip().startswith("--"))
    statements = [s.strip() for s in text.split(";")]
    return [s for s in statements if s.split(" AS")[0] in
            {f"CREATE OR REPLACE VIEW gcn_{name}" for name in ("hidden", "logits", "loss")}]


def make_data(folder: Path, size: dict, seed: int) -> None:
    """The graph (Parquet edge list of Â, and the same as .npy), features, labels, training weights, weights."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import scipy.sparse

    from load_graph import power_law_graph
    n, rng = size["nodes"], np.random.default_rng(seed)
    pairs = power_law_graph(n, size["edges"], 0.8, seed)
    src, dst = pairs.column("src").to_numpy(), pairs.column("dst").to_numpy()
    loops = np.arange(n)
    adjacency = scipy.sparse.coo_array((np.ones(2 * len(src) + n, np.float64),
                                        (np.r_[src, dst, loops], np.r_[dst, src, loops])), shape=(n, n)).tocsr()
    adjacency.data[:] = 1  # an edge is there or not, whichever way and however often it was drawn
    scale = np.asarray(adjacency.sum(axis=1)).ravel() ** -0.5
    normalized = (scipy.sparse.diags_array(scale) @ adjacency @ scipy.sparse.diags_array(scale)).tocoo()
    rows, cols, values = normalized.row.astype(np.int64), normalized.col.astype(np.int64), normalized.data
    pq.write_table(pa.table({"src": rows, "dst": cols, "w": values.astype(np.float32)}), folder / "adjacency.parquet")
    np.save(folder / "adjacency_index.npy", np.vstack([rows, cols]))
    np.save(folder / "adjacency_values.npy", values.astype(np.float32))
    f, h, c = size["features"], size["hidden"], size["classes"]
    np.save(folder / "X.npy", rng.standard_normal((n, f), dtype=np.float32))
    np.save(folder / "labels.npy", rng.integers(0, c, n).astype(np.int64))
    train = np.zeros(n, np.float32)
    train[rng.choice(n, size["train"], replace=False)] = 1 / size["train"]
    np.save(folder / "train_weight.npy", train)
    for name, (a, b) in {"W1": (f, h), "W2": (h, c)}.items():
        bound = math.sqrt(6 / (a + b))
        np.save(folder / f"{name}.npy", rng.uniform(-bound, bound, (a, b)).astype(np.float32))
    print(f"# {n:,} nodes, {size['edges']:,} edges ({len(values):,} non-zeros of Â with self-loops), "
          f"{f} -> {h} -> {c}, {size['train']:,} training nodes", flush=True)


# --- the children -------------------------------------------------------------------------------------------

def trdb_setup(folder: Path, size: dict, tile: int, threads: int, database: str):
    import trdb
    con = trdb.connect(str(folder / f"gcn_{threads}.trdb") if database == "file" else None)
    n, f, h, c = size["nodes"], size["features"], size["hidden"], size["classes"]
    con.execute(f"CREATE OR REPLACE TENSOR A_hat FROM COO '{folder / 'adjacency.parquet'}' (src, dst, w) "
                f"SHAPE ({n}, {n}) TILE ({tile}, {tile})")
    con.execute(f"CREATE OR REPLACE TENSOR X FROM '{folder / 'X.npy'}' TILE ({tile}, {f})")
    con.execute(f"CREATE OR REPLACE TENSOR labels FROM '{folder / 'labels.npy'}' TILE ({tile})")
    con.execute(f"CREATE OR REPLACE TENSOR train_weight FROM '{folder / 'train_weight.npy'}' TILE ({tile})")
    con.execute(f"CREATE OR REPLACE TENSOR W1 FROM '{folder / 'W1.npy'}' TILE ({f}, {h})")
    con.execute(f"CREATE OR REPLACE TENSOR W2 FROM '{folder / 'W2.npy'}' TILE ({h}, {c})")
    for statement in model_statements():
        con.execute(statement)
    con.execute(f"SET workers = {threads}")
    return con


def trdb_step(con) -> dict:
    return {"loss": float(con.execute(STEP).fetchall()[-1][1])}


def trdb_finish(folder: Path):
    def finish(con) -> dict:
        for name in ("W1", "W2"):
            np.save(folder / f"trdb_{name}.npy", con.execute(f"SELECT * FROM {name}").fetch_tensor())
        con.close()
        return {}
    return finish


def torch_setup(folder: Path, size: dict, layout: str, threads: int):
    import torch
    torch.set_num_threads(threads)
    n = size["nodes"]
    index = torch.from_numpy(np.load(folder / "adjacency_index.npy"))
    adjacency = torch.sparse_coo_tensor(index, torch.from_numpy(np.load(folder / "adjacency_values.npy")),
                                        (n, n)).coalesce()
    if layout == "csr":
        adjacency = adjacency.to_sparse_csr()
    weights = {name: torch.tensor(np.load(folder / f"{name}.npy"), requires_grad=True) for name in ("W1", "W2")}
    train = torch.from_numpy(np.flatnonzero(np.load(folder / "train_weight.npy")))
    return {"A": adjacency, "X": torch.from_numpy(np.load(folder / "X.npy")), "weights": weights,
            "labels": torch.from_numpy(np.load(folder / "labels.npy"))[train], "train": train,
            "optimizer": torch.optim.Adam(weights.values(), lr=0.01)}


def torch_step(state) -> dict:
    import torch
    state["optimizer"].zero_grad()
    A, W = state["A"], state["weights"]
    hidden = torch.relu(torch.sparse.mm(A, state["X"] @ W["W1"]))
    logits = torch.sparse.mm(A, hidden @ W["W2"])
    loss = torch.nn.functional.cross_entropy(logits[state["train"]], state["labels"])
    loss.backward()
    state["optimizer"].step()
    return {"loss": float(loss.detach())}


def torch_finish(folder: Path, layout: str):
    def finish(state) -> dict:
        for name, weight in state["weights"].items():
            np.save(folder / f"torch_{layout}_{name}.npy", weight.detach().numpy())
        return {}
    return finish


def child(args: argparse.Namespace) -> None:
    import warnings
    warnings.filterwarnings("ignore")  # PyTorch's beta-state and invariant-check notices about sparse tensors
    folder, size = Path(args.data), SIZES[args.size]
    __import__("trdb" if args.child == "trdb" else "torch")  # before serve() reads the RSS after imports
    if args.child == "trdb":
        serve(lambda: trdb_setup(folder, size, args.tile or size["tile"], args.threads, args.database), trdb_step,
              trdb_finish(folder))
    else:
        layout = args.child.split("_")[1]
        serve(lambda: torch_setup(folder, size, layout, args.threads), torch_step, torch_finish(folder, layout))


# --- the parent ---------------------------------------------------------------------------------------------

def measure(folder: Path, name: str, threads: int, args: argparse.Namespace) -> dict:
    layouts = ["coo", "csr"] if args.torch_sparse == "all" else [args.torch_sparse]
    common = ["--data", str(folder), "--size", name, "--threads", str(threads), "--database", args.database] + (
        ["--tile", str(args.tile)] if args.tile else [])
    children = [Child(__file__, "trdb", common, threads)] + [
        Child(__file__, f"torch_{layout}", common, threads) for layout in layouts]
    replies = take_turns(children, args.rounds)
    if args.profile:
        children[0].call("profile")
        for other in children[1:]:
            other.call("step")
    ends = {child.name: child.close() for child in children}
    losses = {child.name: [r["loss"] for r in replies[child.name]] for child in children}
    for other in children[1:]:
        difference = max(abs(a - b) / abs(b) for a, b in zip(losses["trdb"], losses[other.name]))
        assert difference <= 1e-3, f"{other.name}: epoch losses differ by {difference:.2g} (relative)"
        for weight in ("W1", "W2"):
            # Adam divides each gradient by its own size: where a gradient is near zero, float32 rounding of
            # either system's sums can turn a step of +lr into one of -lr, so single weights may differ by up
            # to 2 lr an epoch; the weights as a whole must agree
            ours, theirs = (np.load(folder / f"{who}_{weight}.npy") for who in ("trdb", other.name))
            gap = np.abs(ours - theirs)
            assert gap.max() <= 0.02 * len(losses["trdb"]) and gap.mean() <= 1e-3 * np.abs(theirs).mean(), (
                f"{weight} after the last epoch differs from {other.name}'s: max {gap.max():.2g}, "
                f"mean {gap.mean():.2g} against a mean size {np.abs(theirs).mean():.2g}")
    times = {child.name: seconds(replies[child.name], args.rounds) for child in children}
    print(f"\n{name}, {threads} thread{'s' if threads > 1 else ''} each: losses equal over "
          f"{len(losses['trdb'])} epochs ({losses['trdb'][0]:.5f} -> {losses['trdb'][-1]:.5f}), weights equal")
    print(f"{'system':<14} {'median s':>9} {'min s':>8} {'cores':>6} {'setup s':>8} {'peak RSS MB':>12} "
          f"{'after imports':>14}")
    for child in children:
        t = times[child.name]
        print(f"{child.name:<14} {statistics.median(t):9.4f} {min(t):8.4f} "
              f"{cores_used(replies[child.name], args.rounds):6.2f} {child.ready['setup_s']:8.2f} "
              f"{ends[child.name]['peak_rss_mb']:12.0f} {ends[child.name]['rss_after_imports_mb']:14.0f}")
    result = {}
    for other in children[1:]:
        rss = ends["trdb"]["peak_rss_mb"] / ends[other.name]["peak_rss_mb"]
        print(f"trdb / {other.name}: time {ratio_text(times['trdb'], times[other.name])}, peak RSS {rss:.2f}x")
        result[other.name] = (statistics.median(times["trdb"]) / statistics.median(times[other.name]), rss)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="cora,arxiv", help="comma-separated: cora, arxiv; default both")
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated; default 1,2")
    parser.add_argument("--rounds", type=int, default=7, help="timed epochs each, taking turns; default 7")
    parser.add_argument("--tile", type=int, default=0, help="trdb's tile of nodes; default 2708 (cora), 21168 (arxiv)")
    parser.add_argument("--torch-sparse", default="coo", choices=["coo", "csr", "all"],
                        help="PyTorch's layout of Â; default coo")
    parser.add_argument("--database", default="file", choices=["file", "memory"],
                        help="where trdb keeps its tensors (each epoch commits there); default file")
    add_turn_options(parser, "epoch")
    parser.add_argument("--size", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if served_as_child(args, child):
        return
    summary = []
    for name in args.sizes.split(","):
        with tempfile.TemporaryDirectory() as folder:
            print(f"\n# GCN at {name} size: one Adam epoch a round, {args.rounds} rounds after a warm-up")
            make_data(Path(folder), SIZES[name], args.seed)
            for threads in [int(t) for t in args.threads.split(",")]:
                for peer, (ratio, rss) in measure(Path(folder), name, threads, args).items():
                    summary.append((name, threads, peer, ratio, rss))
    print(f"\n{'size':<6} {'threads':>7} {'peer':<10} {'time ratio':>10} {'RSS ratio':>9}   (trdb / peer; "
          "targets: arxiv <= 0.6x, cora <= 2x, RSS <= 1.2x)")
    for name, threads, peer, ratio, rss in summary:
        print(f"{name:<6} {threads:7d} {peer:<10} {ratio:9.2f}x {rss:8.2f}x")


if __name__ == "__main__":
    main()
