"""Every queries/*.sql runs with `trdb DB -f FILE`; its printed results are checked with numpy on the stored data,
and every file runs again, in any order, on a database file the others have used, printing the same."""
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


CHECKS = {"attention": check_attention, "digits_mlp": check_digits_mlp, "block_sparse": check_block_sparse,
          "pagerank": check_pagerank, "tiled_matmul": check_tiled_matmul, "linear_regression": check_linear_regression,
          "logistic_regression": check_logistic_regression, "mlp": check_mlp,
          "graph_convolution": check_graph_convolution}


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_query_file(tmp_path, name):
    con, stdout = run_file(tmp_path, name)
    try:
        CHECKS[name](con, stdout)
    finally:
        con.close()


def run_and_check(tmp_path: Path, database: Path, names) -> dict[str, str]:
    printed = {}
    for name in names:
        con, printed[name] = run_file(tmp_path, name, database)
        try:
            CHECKS[name](con, printed[name])
        finally:
            con.close()
    return printed


def test_query_files_run_again_in_any_order_on_one_database(tmp_path):
    """The files share names (X, Y, W, loss, ...): each replaces what it makes (CREATE OR REPLACE), so running
    them all, then all again in the reverse order, on one database file prints the same and checks the same."""
    database = tmp_path / "shared.trdb"
    first = run_and_check(tmp_path, database, sorted(CHECKS))
    again = run_and_check(tmp_path, database, sorted(CHECKS, reverse=True))
    assert again == first
