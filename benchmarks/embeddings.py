"""Knowledge-graph embeddings (TransE-style, the relational auto-differentiation workload): one embedding of 64 floats
a tuple (`TILE (1, 64)`), triples (h, r, t) in an ordinary table. The loss SUM(SUMSQ(E[h] + R[r] - E[t])) in trdb
against numpy fancy indexing; GRAD(loss, E) and one MINIMIZE Adam step against PyTorch (`nn.Embedding` lookups,
autograd, `torch.optim.Adam`) on the same data and initial values, with the same loss and gradient (checked).

    python benchmarks/embeddings.py                      # 100,000 and 1,000,000 triples
    python benchmarks/embeddings.py --triples 200000     # one size

100,000 entity and 1,000 relation embeddings. Each measurement runs `--repeats` times, trdb and its peer
taking turns; medians are compared (trdb / peer). A repeated loss or gradient reads the same tensors; before
each, an untimed write to another tensor ends what the session carries from one statement to the next (the
last statement's forward pass, which a GRAD after a GRAD would read again: docs/autodiff.md), so only the
buffer pool is kept between them. Each Adam step changes both tensors, so no step reuses the one before.
PyTorch is optional: without it, only the loss is compared.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pyarrow as pa

import trdb

try:
    import torch
except ImportError:  # the loss against numpy still runs
    torch = None

LOSS = ("SELECT SUM(SUMSQ(H.v + Q.v - U.v)) AS v FROM triples AS X JOIN E AS H ON H.i = X.h "
        "JOIN R AS Q ON Q.i = X.r JOIN E AS U ON U.i = X.t")
STEP = "MINIMIZE loss WRT (E, R) WITH (optimizer = 'adam', learning_rate = 0.01, steps = 1)"


def forget_carried_work(con: trdb.Connection) -> None:
    """A write elsewhere: the next statement computes its forward pass afresh, reading E and R as cached."""
    con.execute("CREATE OR REPLACE TENSOR _written_between SHAPE (1) TILE (1) FILL ZEROS")


def timed(run) -> tuple[float, object]:
    started = time.perf_counter()
    out = run()
    return time.perf_counter() - started, out


def setup(entities: np.ndarray, relations: np.ndarray, triples: tuple) -> trdb.Connection:
    con = trdb.connect()
    con.execute("CREATE TENSOR E FROM ? TILE (1, 64)", [entities])
    con.execute("CREATE TENSOR R FROM ? TILE (1, 64)", [relations])
    con.execute("CREATE TABLE triples (h BIGINT, r BIGINT, t BIGINT)")
    h, r, t = triples
    con.register("triples_in", pa.table({"h": h, "r": r, "t": t}))
    con.execute("INSERT INTO triples SELECT h, r, t FROM triples_in")
    con.unregister("triples_in")
    con.execute(f"CREATE VIEW loss AS {LOSS}")
    return con


def numpy_loss(entities, relations, triples) -> float:
    h, r, t = triples
    return float(np.square(entities[h] + relations[r] - entities[t]).sum(dtype=np.float64))


def torch_model(entities, relations):
    e = torch.nn.Embedding.from_pretrained(torch.from_numpy(entities.copy()), freeze=False)
    q = torch.nn.Embedding.from_pretrained(torch.from_numpy(relations.copy()), freeze=False)
    return e, q


def torch_loss(e, q, index):
    h, r, t = index
    return (e(h) + q(r) - e(t)).square().sum()


def measure(n: int, repeats: int) -> None:
    rng = np.random.default_rng(0)
    entities = (rng.standard_normal((100_000, 64)) * 0.1).astype(np.float32)
    relations = (rng.standard_normal((1_000, 64)) * 0.1).astype(np.float32)
    triples = tuple(rng.integers(0, size, n) for size in (100_000, 1_000, 100_000))
    con = setup(entities, relations, triples)
    print(f"\n{n:,} triples, 100,000 + 1,000 embeddings of 64 float32")
    print(f"{'work':28} {'trdb':>9} {'peer':>9} {'ratio':>7}  peer")

    times: dict[str, list] = {"trdb": [], "numpy": []}
    expected = numpy_loss(entities, relations, triples)
    for _ in range(repeats):
        forget_carried_work(con)
        elapsed, rows = timed(lambda: con.execute(LOSS).fetchall())
        times["trdb"].append(elapsed)
        assert abs(float(rows[0][0]) - expected) <= 1e-4 * expected, (rows, expected)
        elapsed, _ = timed(lambda: numpy_loss(entities, relations, triples))
        times["numpy"].append(elapsed)
    report("loss", times["trdb"], times["numpy"], "numpy")
    if torch is None:
        print("(PyTorch is not installed: GRAD and MINIMIZE are not compared)")
        con.close()
        return
    torch.set_num_threads(2)
    index = tuple(torch.from_numpy(a) for a in triples)
    e, q = torch_model(entities, relations)

    def torch_grad():
        e.weight.grad = None
        torch_loss(e, q, index).backward()
        return e.weight.grad
    times = {"trdb": [], "torch": []}
    for _ in range(repeats):
        forget_carried_work(con)
        elapsed, grad = timed(lambda: con.execute("SELECT * FROM GRAD(loss, E)").fetch_tensor((100_000, 64)))
        times["trdb"].append(elapsed)
        elapsed, reference = timed(torch_grad)
        times["torch"].append(elapsed)
    scale = float(np.abs(reference.numpy()).max())
    assert np.abs(grad - reference.numpy()).max() <= 1e-4 * scale, "GRAD(loss, E) differs from PyTorch's"
    report("GRAD(loss, E)", times["trdb"], times["torch"], "PyTorch")

    optimizer = torch.optim.Adam([e.weight, q.weight], lr=0.01)

    def torch_step():
        optimizer.zero_grad()
        torch_loss(e, q, index).backward()
        optimizer.step()
    times = {"trdb": [], "torch": []}
    for _ in range(repeats):
        elapsed, _ = timed(lambda: con.execute(STEP))
        times["trdb"].append(elapsed)
        elapsed, _ = timed(torch_step)
        times["torch"].append(elapsed)
    stepped = con.execute("SELECT * FROM E").fetch_tensor((100_000, 64))
    difference = np.abs(stepped - e.weight.detach().numpy()).max()
    assert difference <= 1e-4, f"after {repeats} Adam steps E differs from PyTorch's by {difference}"
    report("MINIMIZE, one Adam step", times["trdb"], times["torch"], "PyTorch")
    con.close()


def report(label: str, ours: list, theirs: list, peer: str) -> None:
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"{label:28} {a:8.3f}s {b:8.3f}s {a / b:6.1f}x  {peer}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triples", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for n in args.triples:
        measure(n, args.repeats)


if __name__ == "__main__":
    main()
