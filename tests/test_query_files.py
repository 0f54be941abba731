"""Every queries/*.sql runs with `trdb DB -f FILE`; its printed results are checked with numpy on the stored data,
and every file runs again on a database file the others have used, printing what it printed on its own."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import trdb

QUERIES = Path(__file__).parent.parent / "queries"


def run_file(tmp_path: Path, name: str, database: Path | None = None):
    database = database or tmp_path / f"{name}.trdb"
    done = subprocess.run([sys.executable, "-m", "trdb", str(database), "-f", str(QUERIES / f"{name}.sql"),
                           "--mode", "csv"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return trdb.connect(str(database)), done.stdout


def tensor(con, name):
    return con.cursor().execute(f"SELECT * FROM {name}").fetch_tensor().astype(np.float64)


def last_value(stdout: str) -> float:
    return float(stdout.strip().splitlines()[-1].split(",")[-1])


def test_every_query_file_is_checked():
    assert {p.stem for p in QUERIES.glob("*.sql")} == set(CHECKS)


def check_tiled_matmul(con, stdout):
    A, B, C = tensor(con, "A"), tensor(con, "B"), tensor(con, "C")
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-3)
    assert last_value(stdout) == 12 and abs(float(stdout.strip().splitlines()[-1].split(",")[0]) /
                                            (C ** 2).sum() - 1) < 1e-4


def check_linear_regression(con, stdout):
    np.testing.assert_allclose(tensor(con, "W"), tensor(con, "W_true"), atol=1e-3)


def check_logistic_regression(con, stdout):
    X, Y, w = tensor(con, "X"), tensor(con, "Y"), tensor(con, "w")
    accuracy = ((X @ w > 0) == (Y > 0.5)).mean()
    assert accuracy >= 0.98 and abs(accuracy - last_value(stdout)) < 1e-4


def check_mlp(con, stdout):
    X, Y, W1, W2 = (tensor(con, n) for n in ("X", "Y", "W1", "W2"))
    final = ((np.maximum(X @ W1, 0) @ W2 - Y) ** 2).sum() / 2048
    rows = [line.split(",") for line in stdout.strip().splitlines()[1:]]
    first, last = float(rows[0][1]), float(rows[-1][1])
    assert final < last < first / 2


def check_graph_convolution(con, stdout):
    adjacency, X, W, H = (tensor(con, n) for n in ("Adj", "X", "W", "H"))
    np.testing.assert_allclose(H, np.maximum(adjacency @ X @ W, 0)[:H.shape[0], :H.shape[1]], rtol=1e-4, atol=1e-4)
    assert con.cursor().execute("SELECT COUNT(*) FROM Adj").fetchone()[0] < 64  # absent tiles are not stored


def check_block_sparse(con, stdout):
    A, B, C = tensor(con, "A"), tensor(con, "B"), tensor(con, "C")
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-3)
    stored = con.cursor().execute("SELECT COUNT(*) FROM A").fetchone()[0]
    expected = sum((i * 7 + j * 3) % 10 == 0 for i in range(8) for j in range(8))
    assert stored == expected  # only the present tiles are stored, and only they are multiplied


def check_pagerank(con, stdout):
    M = tensor(con, "M")
    r = np.full((512, 1), 1 / 512)
    for _ in range(8):
        r = 0.85 * M @ r + 0.15 / 512
    np.testing.assert_allclose(tensor(con, "r"), r, rtol=1e-4)
    assert abs(r.sum() - 1) < 1e-4


def check_attention(con, stdout):
    X, Wq, Wk, Wv = (tensor(con, n) for n in ("X", "Wq", "Wk", "Wv"))
    scores = (X @ Wq) @ (X @ Wk).T / np.sqrt(32)
    weights = np.exp(scores - scores.max(1, keepdims=True))
    weights /= weights.sum(1, keepdims=True)
    np.testing.assert_allclose(tensor(con, "O"), weights @ (X @ Wv), rtol=1e-4, atol=1e-5)


def check_digits_mlp(con, stdout):
    X, Y, test_X, test_Y = (tensor(con, n) for n in ("X", "Y", "test_X", "test_Y"))
    W1, b1, W2, b2 = (tensor(con, n) for n in ("W1", "b1", "W2", "b2"))

    def logits(x):
        return np.maximum(x @ W1 + b1, 0) @ W2 + b2
    z = logits(X)
    z -= z.max(axis=1, keepdims=True)
    loss = -(Y * (z - np.log(np.exp(z).sum(axis=1, keepdims=True)))).sum() / len(X)
    lines = stdout.strip().splitlines()
    steps = [line.split(",") for line in lines if line.split(",")[0].isdigit()]
    assert len(steps) == 200 and float(steps[-1][1]) < float(steps[0][1]) / 20
    assert abs(loss - float(steps[-1][1])) < 0.05 * float(steps[-1][1])  # after the last step: a bit lower
    accuracy = (logits(test_X).argmax(axis=1) == test_Y.argmax(axis=1)).mean()
    assert accuracy >= 0.85 and abs(accuracy - last_value(stdout)) < 1e-4


def minimize_losses(stdout: str) -> list[float]:
    """The (step, loss) rows a MINIMIZE printed, in order."""
    return [float(line.split(",")[1]) for line in stdout.strip().splitlines() if line.split(",")[0].isdigit()]


def rows(con, sql):
    return con.cursor().execute(sql).fetchall()


def check_gcn(con, stdout):
    A, X, W1, W2 = (tensor(con, n) for n in ("A_hat", "X", "W1", "W2"))
    labels, mask, weight = (tensor(con, n) for n in ("labels", "train_mask", "train_weight"))
    edges = np.array(rows(con, "SELECT src, dst FROM gcn_edges"), dtype=np.int64)
    adjacency = np.zeros(A.shape)
    adjacency[edges[:, 0], edges[:, 1]] = 1
    assert (adjacency == adjacency.T).all() and (np.diag(adjacency) == 1).all()  # symmetric, with self-loops
    degree = adjacency.sum(axis=1)
    np.testing.assert_allclose(A, adjacency / np.sqrt(np.outer(degree, degree)), rtol=1e-6)
    np.testing.assert_allclose(weight, mask / mask.sum(), rtol=1e-6)
    logits = A @ np.maximum(A @ X @ W1, 0) @ W2
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -(log_p[np.arange(len(labels)), labels.astype(int)] * weight).sum()
    losses = minimize_losses(stdout)
    assert len(losses) == 50 and losses[-1] < losses[0] / 5
    assert loss < losses[-1]  # the loss after the last step is lower than the loss before it
    test = mask == 0
    accuracy = (logits.argmax(axis=1) == labels)[test].mean()
    assert accuracy >= 0.6 and abs(accuracy - last_value(stdout)) < 1e-4


def check_llama_block(con, stdout):
    X, g1, g2, Wq, Wk, Wv, Wo, W1, W3, W2 = (tensor(con, n) for n in (
        "X", "attention_norm", "ffn_norm", "Wq", "Wk", "Wv", "Wo", "W1", "W3", "W2"))
    seq, dim = X.shape
    heads = dim // 64

    def rms(x, gain):
        return x / np.sqrt((x ** 2).mean(axis=1, keepdims=True) + 1e-5) * gain

    def rotary(x):  # (x0, x1) pairs of each head turned by position * 10000^(-pair / 32), as LLaMA's complex product
        pairs = x.reshape(seq, heads, 32, 2)
        angle = np.arange(seq)[:, None, None] * 10000.0 ** (-np.arange(32) / 32)
        turned = (pairs[..., 0] + 1j * pairs[..., 1]) * np.exp(1j * angle)
        return np.stack([turned.real, turned.imag], axis=-1).reshape(seq, heads, 64)
    xn = rms(X, g1)
    q, k, v = rotary(xn @ Wq), rotary(xn @ Wk), (xn @ Wv).reshape(seq, heads, 64)
    scores = np.einsum("shk,thk->hst", q, k) / 8 + np.triu(np.full((seq, seq), -np.inf), 1)
    weights = np.exp(scores - scores.max(axis=2, keepdims=True))
    weights /= weights.sum(axis=2, keepdims=True)
    h = X + np.einsum("hst,thk->shk", weights, v).reshape(seq, dim) @ Wo
    hn = rms(h, g2)
    a = hn @ W1
    expected = h + (a / (1 + np.exp(-a)) * (hn @ W3)) @ W2
    np.testing.assert_allclose(tensor(con, "block_out"), expected, rtol=1e-4, atol=1e-4)
    assert abs(last_value(stdout) / (expected ** 2).sum() - 1) < 1e-4


def check_nnmf(con, stdout):
    W_true, H_true, V, W, H = (tensor(con, n) for n in ("W_true", "H_true", "V", "W", "H"))
    assert (W_true >= 0).all() and (W_true == 0).mean() > 0.4
    np.testing.assert_allclose(V, W_true @ H_true, rtol=1e-4, atol=1e-4)
    assert W.min() >= 0 and H.min() >= 0 and (W == 0).any()  # the clamp held, and it was needed
    losses = minimize_losses(stdout)
    assert len(losses) == 60 and losses[-1] < losses[0] / 20
    error = np.sqrt(((V - W @ H) ** 2).sum() / (V ** 2).sum())
    printed = [line for line in stdout.strip().splitlines() if line[:1].isdigit() or line[:1] == "-"][-3:]
    assert abs(float(printed[0]) / error - 1) < 1e-4 and error < 0.2
    assert np.float32(printed[1]) == np.float32(W.min()) and np.float32(printed[2]) == np.float32(H.min())


def check_transe(con, stdout):
    E, R = tensor(con, "E"), tensor(con, "R")
    h, r, t, t_neg = np.array(rows(con, "SELECT h, r, t, t_neg FROM transe_triples"), dtype=np.int64).T
    positive = ((E[h] + R[r] - E[t]) ** 2).sum(axis=1)
    negative = ((E[h] + R[r] - E[t_neg]) ** 2).sum(axis=1)
    loss = np.maximum(1 + positive - negative, 0).mean()
    losses = minimize_losses(stdout)
    assert len(losses) == 20 and loss < losses[-1] < losses[0] / 2
    ranked_right = (positive < negative).mean()
    assert ranked_right >= 0.9 and abs(ranked_right - last_value(stdout)) < 1e-4


CHECKS = {"attention": check_attention, "digits_mlp": check_digits_mlp, "block_sparse": check_block_sparse,
          "pagerank": check_pagerank, "tiled_matmul": check_tiled_matmul, "linear_regression": check_linear_regression,
          "logistic_regression": check_logistic_regression, "mlp": check_mlp,
          "graph_convolution": check_graph_convolution, "gcn": check_gcn, "llama_block": check_llama_block,
          "nnmf": check_nnmf, "transe": check_transe}


# name -> what the file printed on a database of its own (test_query_file's run, shared with the test after it)
PRINTED_ALONE: dict[str, str] = {}


def run_and_check(tmp_path: Path, name: str, database: Path | None = None) -> str:
    con, printed = run_file(tmp_path, name, database)
    try:
        CHECKS[name](con, printed)
    finally:
        con.close()
    return printed


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_query_file(tmp_path, name):
    PRINTED_ALONE[name] = run_and_check(tmp_path, name)


def test_query_files_run_again_in_any_order_on_one_database(tmp_path):
    """The files share names (X, Y, W, loss, ...): each replaces what it makes (CREATE OR REPLACE), so each file,
    run on one database after the files that sort after it, checks the same and prints what it printed on a
    database of its own (test_query_file's runs; run here where that test was not)."""
    database = tmp_path / "shared.trdb"
    for name in sorted(CHECKS, reverse=True):
        again = run_and_check(tmp_path, name, database)
        alone = PRINTED_ALONE.get(name) or run_and_check(tmp_path, name)
        # the same text and numbers, to float32 rounding in the last digit: a loss summed over two workers (a
        # MINIMIZE's loss is summed from its gradients' shared tuples, spread over the workers) meets the
        # partial sums in the order the workers finish
        assert _without_numbers(again) == _without_numbers(alone), name
        np.testing.assert_allclose(printed_numbers(again), printed_numbers(alone), rtol=1e-5, err_msg=name)


def _without_numbers(stdout: str) -> list[list[str]]:
    return [["#" if _is_number(field) else field for field in line.split(",")] for line in stdout.strip().splitlines()]


def printed_numbers(stdout: str) -> list[float]:
    return [float(field) for line in stdout.strip().splitlines() for field in line.split(",") if _is_number(field)]


def _is_number(field: str) -> bool:
    return field.replace(".", "").replace("-", "").replace("+", "").replace("e", "").isdigit()
