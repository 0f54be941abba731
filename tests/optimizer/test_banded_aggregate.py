"""A product whose result does not fit in memory_limit runs in bands of one input's key (a blocked order):
chosen by the cost model over a spilling aggregate, equal to numpy, and only when the result does not fit."""
from __future__ import annotations

import numpy as np
import pytest

import trdb

N, T = 512, 64        # 8 x 8 tiles of 16 KB: each tensor and the product are 1 MB
PRODUCT = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"


@pytest.fixture(params=[1, 2], ids=["workers1", "workers2"])
def cur(request, tmp_path):
    con = trdb.connect(str(tmp_path / "db.trdb"), workers=request.param)
    cursor = con.cursor()
    cursor.execute(f"CREATE TENSOR A SHAPE ({N}, {N}) TILE ({T}, {T}) FILL RANDOM_NORMAL(0, 1, 1)")
    cursor.execute(f"CREATE TENSOR B SHAPE ({N}, {N}) TILE ({T}, {T}) FILL RANDOM_NORMAL(0, 1, 2)")
    yield cursor
    con.close()


def explain(cur, sql: str) -> str:
    return "\n".join(row[0] for row in cur.execute("EXPLAIN " + sql).fetchall())


def top(plan: str) -> str:
    """The plan's first operator below the exchange that gathers the workers' results."""
    names = [line.strip().removeprefix("-> ").split("(")[0].split()[0] for line in plan.splitlines()]
    return next(name for name in names if name != "GatherExec")


def dense(cur, name: str) -> np.ndarray:
    return cur.execute(f"SELECT * FROM {name}").fetch_tensor().astype(np.float64)


def test_a_product_larger_than_the_budget_runs_in_bands_without_spilling(cur):
    a, b = dense(cur, "A"), dense(cur, "B")
    cur.execute("SET memory_limit = '2MB'")  # trdb's part: 1 MB, less than the product
    plan = explain(cur, PRODUCT)
    assert top(plan) == "UnionAllExec" and plan.count("HashAggregateExec") >= 2, plan
    assert "FilterExec(i IN (" in plan and not [line for line in plan.splitlines() if "spill=" in line], plan
    cur.execute("CREATE TENSOR C AS " + PRODUCT)
    cur.execute("SET memory_limit = '1GB'")
    np.testing.assert_allclose(dense(cur, "C"), a @ b, rtol=1e-4, atol=1e-3)


def test_a_band_of_the_right_input_when_its_key_is_grouped_first(cur):
    a, b = dense(cur, "A"), dense(cur, "B")
    cur.execute("SET memory_limit = '2MB'")
    query = "SELECT B.j, A.i, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY B.j, A.i"
    plan = explain(cur, query)
    assert top(plan) == "UnionAllExec" and "FilterExec(j IN (" in plan, plan
    got = cur.execute(query).fetchall()
    product = a @ b
    assert len(got) == (N // T) ** 2
    for j, i, tile in got:
        np.testing.assert_allclose(tile, product[i * T:(i + 1) * T, j * T:(j + 1) * T], rtol=1e-4, atol=1e-3)


def test_a_product_that_fits_is_one_aggregate(cur):
    plan = explain(cur, PRODUCT)
    assert "UnionAllExec" not in plan and top(plan).startswith("HashAggregateExec"), plan
