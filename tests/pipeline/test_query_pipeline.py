"""The query pipeline: EXPLAIN and EXPLAIN ANALYZE show the plan SELECT runs, shared subplans once."""
from __future__ import annotations

import re

import numpy as np

from trdb.pipeline.query import Pipeline

MLP = [
    "CREATE TENSOR X SHAPE (64, 32) TILE (32, 16) FILL RANDOM_NORMAL(0, 1, 1)",
    "CREATE TENSOR W SHAPE (32, 8) TILE (16, 8) FILL RANDOM_NORMAL(0, 1, 2)",
    "CREATE VIEW h AS SELECT X.i, W.j, SUM(MATMUL(X.v, W.v)) AS v FROM X JOIN W ON X.j = W.i GROUP BY X.i, W.j",
    # a loss of one tuple a row block: its gradient's seed pairs each with its tuple, so the loss is computed and
    # shares the forward pass with the gradient (a loss of one scalar tuple is seeded by a constant instead)
    "CREATE VIEW loss AS SELECT h.i, SUM(SUMSQ(RELU(h.v))) AS v FROM h GROUP BY h.i",
]
GRAD = "SELECT * FROM GRAD(loss, W)"


def _operators(lines: list[str]) -> list[str]:
    """Each line's section title or indented operator name, without estimates or measurements."""
    return [re.sub(r"\s*\[(est|actual)\..*$|\s*\[actual .*$", "", line) for line in lines
            if not line.startswith(("Optimizer rules", "Executed work"))]


def test_explain_and_explain_analyze_show_the_same_plan_with_its_shared_subplans(cur):
    for statement in MLP:
        cur.execute(statement)
    explained = [row[0] for row in cur.execute("EXPLAIN " + GRAD).fetchall()]
    analyzed = [row[0] for row in cur.execute("EXPLAIN ANALYZE " + GRAD).fetchall()]
    assert _operators(explained) == _operators(analyzed)
    assert explained[0].startswith("Shared subplan 1") and "Plan:" in explained
    # the forward product: tiled, or on whole arrays in row blocks (dense_products) where there are workers
    forward = [n for n, line in enumerate(explained) if "SUM(MATMUL(v, v#2))" in line
               or re.search(r"EINSUM\('ij,jk->ik', X, W\) on whole arrays in \d+ row blocks on 2 threads", line)]
    assert len(forward) == 1 and forward[0] < explained.index("Plan:")  # the forward pass: shared, shown once
    measured = [line for line in analyzed if "actual tuples=" in line]
    assert len(measured) == len([line for line in analyzed if "[est." in line])  # every operator ran


def test_select_runs_the_plan_explain_shows(cur, monkeypatch):
    for statement in MLP:
        cur.execute(statement)
    executed = []
    original = Pipeline.execute

    def execute(self, node, **options):
        executed.append(node)
        return original(self, node, **options)
    monkeypatch.setattr(Pipeline, "execute", execute)
    gradient = cur.execute(GRAD).fetch_tensor()
    ran = len(executed)
    explained = [row[0] for row in cur.execute("EXPLAIN " + GRAD).fetchall()]
    shared = sum(line.startswith("Shared subplan") for line in explained)
    assert ran == shared + 1  # each shared subplan, then the plan
    x, w = (cur.execute(f"SELECT * FROM {n}").fetch_tensor().astype(np.float64) for n in "XW")
    h = x @ w
    np.testing.assert_allclose(gradient, x.T @ (2 * np.maximum(h, 0)), rtol=1e-4, atol=1e-3)


def test_a_query_without_shared_subplans_explains_as_one_plan(cur):
    cur.execute("CREATE TENSOR A SHAPE (8, 8) TILE (4, 4) FILL ONES")
    lines = [row[0] for row in cur.execute("EXPLAIN SELECT A.i, A.j, A.v * 2 AS v FROM A").fetchall()]
    assert not any(line.startswith(("Shared subplan", "Plan:")) for line in lines)
    assert lines[0].startswith("ProjectExec") or lines[0].startswith("GatherExec")


def test_a_minimize_step_reads_the_input_once_forward_and_once_backward(cur, monkeypatch):
    """The loss and each gradient of a step share the forward pass (expanded before they are counted)."""
    for statement in MLP:
        cur.execute(statement)
    cur.execute("CREATE TENSOR W2 SHAPE (8, 1) TILE (8, 1) FILL RANDOM_NORMAL(0, 1, 3)")
    cur.execute("CREATE VIEW loss2 AS SELECT SUM(SUMSQ(RELU(h.v))) + SUM(SUMSQ(W2.v)) AS v FROM h, W2")
    scans = []
    original = Pipeline.execute

    def execute(self, node, checked=False, **options):
        stack = [node]
        while stack:
            current = stack.pop()
            stack.extend(current.children)
            if current.operator == "TensorScanExec" and current.spec.tensor.name == "X":
                scans.append(current)
        return original(self, node, checked, **options)
    monkeypatch.setattr(Pipeline, "execute", execute)
    cur.execute("MINIMIZE loss2 WRT (W, W2) WITH (optimizer = 'adam', learning_rate = 0.01, steps = 1)")
    assert 1 <= len(scans) <= 2  # the forward product X @ W once; dW = X^T @ (...) reads X again
