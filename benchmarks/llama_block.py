"""One LLaMA block forward (the Einsummable / EinDecomp workload): queries/llama_block.sql's views (RMSNorm,
rotary embeddings, causal softmax attention with relational heads, SwiGLU, residuals) against PyTorch eager,
at 1 and at 2 threads each.

    python benchmarks/llama_block.py                      # both sizes
    python benchmarks/llama_block.py --sizes 256 --rounds 31

Sizes (sequence, dimension, heads): 256 x 512 with 8 heads and 512 x 1024 with 16 heads; head dimension 64,
SwiGLU hidden 256 * ceil(8 * dim / 3 / 256) (1,536 and 2,816), float32. The input, weights, rotary tables
and causal mask are made once with numpy and given to both systems: trdb stores them (`FROM ?`, Wq/Wk/Wv in
tiles of 64 columns, one per head, Wo in tiles of 64 rows) and times `SELECT * FROM llama_block` with its
`fetch_tensor()`, each after an untimed write of another tensor (trdb carries a statement's shared subplans,
the attention among them, to the next statement while nothing is written: a block must not reuse the last
one's); the peers are PyTorch eager under `torch.inference_mode()`: `torch` is the LLaMA reference
code's attention (complex rotary products, `softmax(q k^T / 8 + mask) v`), `torch_sdpa` the same block with
`F.scaled_dot_product_attention(is_causal=True)`. Every output is checked against the first PyTorch's.

Each system runs in a child process of its own with its thread count fixed (benchmarks/turns.py: OpenBLAS
and OpenMP threads, `torch.set_num_threads`, trdb's `workers`); they take turns, one block each a round, after
warm-up rounds. Printed: median seconds, the ratio of medians trdb / PyTorch with the interval of the paired
ratios' median, peak RSS. `--profile` adds one more block, trdb's under cProfile.
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

QUERY_FILE = HERE.parent / "queries" / "llama_block.sql"
QUERY = "SELECT * FROM llama_block"
HEAD = 64
SIZES = {256: (512, 8), 512: (1024, 16)}  # sequence: (dimension, heads)


def hidden_size(dim: int) -> int:
    return 256 * -(-8 * dim // 3 // 256)


def model_statements() -> list[str]:
    """queries/llama_block.sql's views: the block (the rest of the file makes data of its default size)."""
    text = "\n".join(line for line in QUERY_FILE.read_text().splitlines() if not line.lstrip().startswith("--"))
    statements = [s.strip() for s in text.split(";")]
    names = ("xn", "q", "k", "attention", "h", "hn", "block")
    return [s for s in statements if s.split(" AS")[0] in {f"CREATE OR REPLACE VIEW llama_{n}" for n in names}]


def make_data(folder: Path, seq: int, seed: int) -> None:
    dim, _ = SIZES[seq]
    hidden, rng = hidden_size(dim), np.random.default_rng(seed)

    def normal(shape, std):
        return (rng.standard_normal(shape) * std).astype(np.float32)
    arrays = {"X": normal((seq, dim), 1), "attention_norm": rng.uniform(0.5, 1.5, dim).astype(np.float32),
              "ffn_norm": rng.uniform(0.5, 1.5, dim).astype(np.float32),
              **{name: normal((dim, dim), dim ** -0.5) for name in ("Wq", "Wk", "Wv", "Wo")},
              "W1": normal((dim, hidden), dim ** -0.5), "W3": normal((dim, hidden), dim ** -0.5),
              "W2": normal((hidden, dim), hidden ** -0.5)}
    angles = np.arange(seq)[:, None] * 10000.0 ** (-np.arange(HEAD // 2) / (HEAD // 2))
    arrays["rope_cos"] = np.stack([np.cos(angles), np.cos(angles)], axis=-1).astype(np.float32)
    arrays["rope_sin"] = np.stack([-np.sin(angles), np.sin(angles)], axis=-1).astype(np.float32)
    arrays["causal_mask"] = np.triu(np.full((seq, seq), -np.inf, np.float32), 1)
    arrays["pair_swap"] = np.array([[0, 1], [1, 0]], np.float32)
    for name, array in arrays.items():
        np.save(folder / f"{name}.npy", array)


def load(folder: Path) -> dict[str, np.ndarray]:
    return {path.stem: np.load(path) for path in folder.glob("*.npy") if not path.stem.startswith("out_")}


# --- the children -------------------------------------------------------------------------------------------

def trdb_setup(folder: Path, threads: int):
    import trdb
    arrays = load(folder)
    seq, dim = arrays["X"].shape
    hidden = arrays["W1"].shape[1]
    tiles = {"X": (seq, dim), "attention_norm": (dim,), "ffn_norm": (dim,), "Wq": (dim, HEAD), "Wk": (dim, HEAD),
             "Wv": (dim, HEAD), "Wo": (HEAD, dim), "W1": (dim, hidden), "W3": (dim, hidden), "W2": (hidden, dim),
             "causal_mask": (seq, seq), "pair_swap": (2, 2)}
    con = trdb.connect()
    for name, tile in tiles.items():
        con.execute(f"CREATE TENSOR {name} FROM ? TILE ({', '.join(map(str, tile))})", [arrays[name]])
    for name in ("rope_cos", "rope_sin"):  # one key, the sequence's: the (pair, cos/sin) axes stay in the tile
        con.execute(f"CREATE TENSOR {name} (i) FROM ? TILE ({seq}, {HEAD // 2}, 2)", [arrays[name]])
    for statement in model_statements():
        con.execute(statement)
    con.execute("CREATE TENSOR run_count SHAPE (1) TILE (1) FILL ZEROS")
    con.execute(f"SET workers = {threads}")
    return {"con": con, "folder": folder}


def trdb_before(state) -> None:
    """A write, so that no block reads what the one before computed: trdb keeps a statement's shared subplans
    (here the normalized input, the attention, ...) for the next statement while nothing is written."""
    state["con"].execute("UPDATE run_count SET v = run_count.v + 1")


def trdb_step(state) -> dict:
    state["out"] = state["con"].execute(QUERY).fetch_tensor()
    return {}


def torch_setup(folder: Path, threads: int, sdpa: bool):
    import torch
    torch.set_num_threads(threads)
    arrays = {name: torch.from_numpy(array) for name, array in load(folder).items()}
    seq, _ = arrays["X"].shape
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * 10000.0 ** (
        -torch.arange(HEAD // 2, dtype=torch.float64) / (HEAD // 2))
    arrays["freqs_cis"] = torch.polar(torch.ones_like(angles), angles).to(torch.complex64)
    return {"arrays": arrays, "sdpa": sdpa, "folder": folder}


def torch_block(a: dict, sdpa: bool):
    """The LLaMA reference code's block (x @ W with W as stored, no nn.Linear transposes)."""
    import torch
    import torch.nn.functional as F
    x = a["X"]
    seq, dim = x.shape
    heads = dim // HEAD

    def rms(v, gain):
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-5) * gain

    def rotary(v):
        pairs = torch.view_as_complex(v.reshape(seq, heads, HEAD // 2, 2))
        return torch.view_as_real(pairs * a["freqs_cis"][:, None, :]).flatten(2)
    xn = rms(x, a["attention_norm"])
    q = rotary(xn @ a["Wq"]).transpose(0, 1)
    k = rotary(xn @ a["Wk"]).transpose(0, 1)
    v = (xn @ a["Wv"]).view(seq, heads, HEAD).transpose(0, 1)
    if sdpa:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        o = torch.softmax(q @ k.transpose(1, 2) / HEAD ** 0.5 + a["causal_mask"], dim=-1) @ v
    h = x + o.transpose(0, 1).reshape(seq, dim) @ a["Wo"]
    hn = rms(h, a["ffn_norm"])
    return h + (F.silu(hn @ a["W1"]) * (hn @ a["W3"])) @ a["W2"]


def torch_step(state) -> dict:
    import torch
    with torch.inference_mode():
        state["out"] = torch_block(state["arrays"], state["sdpa"]).numpy()
    return {}


def finish(name: str):
    def save(state) -> dict:
        np.save(state["folder"] / f"out_{name}.npy", state["out"])
        return {}
    return save


def child(args: argparse.Namespace) -> None:
    folder = Path(args.data)
    __import__("trdb" if args.child == "trdb" else "torch")  # before serve() reads the RSS after imports
    if args.child == "trdb":
        serve(lambda: trdb_setup(folder, args.threads), trdb_step, finish("trdb"), before=trdb_before)
    else:
        serve(lambda: torch_setup(folder, args.threads, args.child == "torch_sdpa"), torch_step, finish(args.child))


# --- the parent ---------------------------------------------------------------------------------------------

def measure(folder: Path, seq: int, threads: int, args: argparse.Namespace) -> dict[str, list[float]]:
    common = ["--data", str(folder), "--threads", str(threads)]
    names = ["trdb", "torch", "torch_sdpa"]
    children = [Child(__file__, name, common, threads) for name in names]
    replies = take_turns(children, args.rounds, warmup=3)
    if args.profile:
        children[0].call("profile")
    ends = {child.name: child.close() for child in children}
    expected = np.load(folder / "out_torch.npy")
    for name in names:
        got = np.load(folder / f"out_{name}.npy")
        error = np.abs(got.astype(np.float64) - expected).max() / np.abs(expected).max()
        assert error <= 1e-4, f"{name}: the block's output differs from PyTorch's by {error:.2g} (relative)"
    times = {child.name: seconds(replies[child.name], args.rounds) for child in children}
    dim, heads = SIZES[seq]
    print(f"\nsequence {seq}, dimension {dim}, {heads} heads; {threads} thread{'s' if threads > 1 else ''} "
          "each; outputs equal")
    print(f"{'system':<12} {'median ms':>10} {'min ms':>8} {'cores':>6} {'peak RSS MB':>12}")
    for child in children:
        t = times[child.name]
        print(f"{child.name:<12} {statistics.median(t) * 1e3:10.2f} {min(t) * 1e3:8.2f} "
              f"{cores_used(replies[child.name], args.rounds):6.2f} {ends[child.name]['peak_rss_mb']:12.0f}")
    for peer in names[1:]:
        print(f"trdb / {peer}: {ratio_text(times['trdb'], times[peer])}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="256,512", help="sequence lengths, comma-separated: 256, 512")
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated; default 1,2")
    parser.add_argument("--rounds", type=int, default=15, help="timed blocks each, taking turns; default 15")
    add_turn_options(parser, "block")
    args = parser.parse_args()
    if served_as_child(args, child):
        return
    summary = []
    for seq in [int(s) for s in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory() as folder:
            make_data(Path(folder), seq, args.seed)
            medians = {}
            for threads in [int(t) for t in args.threads.split(",")]:
                times = measure(Path(folder), seq, threads, args)
                medians[threads] = {name: statistics.median(t) for name, t in times.items()}
            for threads, m in medians.items():
                summary.append((seq, threads, m["trdb"] / m["torch"], m["trdb"] / m["torch_sdpa"],
                                m["trdb"] / medians[min(medians)]["trdb"]))
    print(f"\n{'seq':>4} {'threads':>7} {'/ torch':>8} {'/ sdpa':>7} {'trdb / trdb at fewest threads':>30}"
          "   (targets: <= 1.2x torch at 1 thread; at 2 threads no slower than at 1)")
    for seq, threads, ratio, sdpa, scaling in summary:
        print(f"{seq:4d} {threads:7d} {ratio:7.2f}x {sdpa:6.2f}x {scaling:29.2f}x")


if __name__ == "__main__":
    main()
