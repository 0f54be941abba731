"""EXPLAIN (FORMAT json | dot) and EXPLAIN of CREATE TENSOR ... AS, INSERT, UPDATE and MINIMIZE."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

import trdb

QUERY = "SELECT X.i, W.j, SUM(MATMUL(X.v, W.v)) AS v FROM X JOIN W ON X.j = W.i GROUP BY X.i, W.j"


@pytest.fixture
def cur():
    con = trdb.connect()
    cur = con.cursor()
    cur.execute("SET workers = 2")
    cur.execute("SET min_parallel_cost = 0")  # exchanges in the plan
    cur.execute("CREATE TENSOR X SHAPE (6, 4) TILE (2, 2) FILL RANDOM_NORMAL(0, 1, 1)")
    cur.execute("CREATE TENSOR W SHAPE (4, 4) TILE (2, 2) FILL RANDOM_NORMAL(0, 1, 2)")
    cur.execute(f"CREATE VIEW loss AS SELECT SUM(SUMSQ(p.v)) AS v FROM ({QUERY}) AS p")
    yield cur
    con.close()


def strict_json(text: str):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def operators(node: dict) -> list[str]:
    return [node["operator"]] + [name for child in node["children"] for name in operators(child)]


def single(cur, statement: str) -> str:
    cur.execute(statement)
    rows = cur.fetchall()
    assert len(rows) == 1
    return rows[0][0]


def test_json_has_the_operators_of_the_text_plan(cur):
    cur.execute(f"EXPLAIN {QUERY}")
    text = [re.match(r"\s*(?:-> )?(\w+)", row[0]).group(1) for row in cur.fetchall()]
    document = strict_json(single(cur, f"EXPLAIN (FORMAT json) {QUERY}"))
    assert document["analyze"] is False and document["statement"] == QUERY
    [plan] = document["plans"]
    assert operators(plan["plan"]) == text
    assert "actual" not in plan["plan"] and plan["plan"]["estimates"]["tuples"] > 0


def test_json_under_analyze_has_actual_tuples(cur):
    document = strict_json(single(cur, f"EXPLAIN (ANALYZE, FORMAT json) {QUERY}"))
    root = document["plans"][0]["plan"]
    assert root["actual"]["tuples"] == 6  # a 6 x 4 result in 2 x 2 tiles
    assert {r["rule"] for r in document["optimizer_rules"]} >= {"predicate_pushdown"}


def test_dot_is_one_graph_with_an_edge_per_input(cur):
    dot = single(cur, f"EXPLAIN (FORMAT dot) {QUERY}")
    plan = strict_json(single(cur, f"EXPLAIN (FORMAT json) {QUERY}"))["plans"][0]["plan"]
    assert dot.startswith("digraph plan {") and dot.rstrip().endswith("}")
    nodes = re.findall(r"^\s*(n\d+) \[shape=", dot, re.M)
    edges = re.findall(r"^\s*(n\d+) -> (n\d+);$", dot, re.M)
    assert len(nodes) == len(operators(plan)) and len(edges) == len(nodes) - 1
    assert {n for edge in edges for n in edge} <= set(nodes)
    assert dot.count("{") == dot.count("}")
    pydot = pytest.importorskip("pydot")
    [graph] = pydot.graph_from_dot_data(dot)
    assert len(graph.get_subgraphs()[0].get_nodes()) == len(nodes)


def test_explain_of_writing_statements_writes_nothing(cur):
    cur.execute("SELECT * FROM W")
    before = cur.fetch_tensor()
    for statement in ("CREATE TENSOR B AS SELECT W.i, W.j, W.v * 2 AS v FROM W",
                      "INSERT INTO W SELECT W.i, W.j, W.v FROM W",
                      "UPDATE W SET v = W.v * 2 WHERE W.i = 0",
                      "DELETE FROM W WHERE W.j = 1",
                      "MINIMIZE loss WRT (W, X) WITH (steps = 3)"):
        for prefix in ("EXPLAIN", "EXPLAIN ANALYZE"):
            cur.execute(f"{prefix} {statement}")
            lines = [row[0] for row in cur.fetchall()]
            assert lines[0].endswith(" runs:"), lines[0]
    cur.execute("SELECT * FROM W")
    np.testing.assert_array_equal(cur.fetch_tensor(), before)
    cur.execute("SHOW TENSORS")
    assert [row[0] for row in cur.fetchall()] == ["W", "X"]


def test_explain_minimize_shows_the_loss_and_each_gradient(cur):
    document = strict_json(single(cur, "EXPLAIN (FORMAT json) MINIMIZE loss WRT (W, X)"))
    assert [p["title"] for p in document["plans"]] == [
        "MINIMIZE loss, each step: the loss", "MINIMIZE loss, each step: the gradient of W",
        "MINIMIZE loss, each step: the gradient of X"]


def test_explain_refuses_what_runs_no_query(cur):
    with pytest.raises(trdb.NotSupportedError, match="EXPLAIN takes SELECT"):
        cur.execute("EXPLAIN DROP TENSOR W")
    with pytest.raises(trdb.ProgrammingError, match="did you mean json"):
        cur.execute("EXPLAIN (FORMAT jsno) SELECT * FROM W")


def test_plain_sql_dot_is_duckdbs_graphviz(cur):
    cur.execute("EXPLAIN (FORMAT dot) SELECT 1")
    assert "digraph" in cur.fetchall()[0][-1]
