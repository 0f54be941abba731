"""A product whose result does not fit in memory_limit runs in bands of one input's key (a blocked order) when
the cost model finds reading the inputs once per band cheaper than spilling the partial sums; the result
equals numpy's either way, and a product that fits is one aggregate."""
from __future__ import annotations

import numpy as np
import pytest

import trdb

PRODUCT = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"
# (rows, inner, columns) in tiles of T x T. WIDE: a 36 x 36 grid of result tiles from an inner grid of 2, each
# tensor 1.3 MB or less: the partial sums (every product) spill more bytes than reading A and B again per band.
# DEEP: 5 x 8 x 5 tiles of 64 KB, the product 1.6 MB: every group takes 8 products, and reading A and B (2.6 MB
# each) once per band (several bands) costs more than spilling the products.
WIDE, DEEP = (36, 2, 36, 16), (5, 8, 5, 128)


@pytest.fixture(params=[1, 2], ids=["workers1", "workers2"])
def con(request, tmp_path):
    # tile products (no DenseEinsum: dense_products)
    connection = trdb.connect(str(tmp_path / "db.trdb"), workers=request.param, dense_einsum_bytes=0)
    yield connection
    connection.close()


def tensors(con, shape) -> tuple:
    """A and B of `shape`, and their values."""
    rows, inner, columns, t = shape
    cur = con.cursor()
    cur.execute(f"CREATE TENSOR A SHAPE ({rows * t}, {inner * t}) TILE ({t}, {t}) FILL RANDOM_NORMAL(0, 1, 1)")
    cur.execute(f"CREATE TENSOR B SHAPE ({inner * t}, {columns * t}) TILE ({t}, {t}) FILL RANDOM_NORMAL(0, 1, 2)")
    return cur, dense(cur, "A"), dense(cur, "B")


def explain(cur, sql: str) -> str:
    return "\n".join(row[0] for row in cur.execute("EXPLAIN " + sql).fetchall())


def top(plan: str) -> str:
    """The plan's first operator below the exchange that gathers the workers' results."""
    names = [line.strip().removeprefix("-> ").split("(")[0].split()[0] for line in plan.splitlines()]
    return next(name for name in names if name != "GatherExec")


def dense(cur, name: str) -> np.ndarray:
    return cur.execute(f"SELECT * FROM {name}").fetch_tensor().astype(np.float64)


def spilling(plan: str) -> list[str]:
    return [line for line in plan.splitlines() if "spill=" in line]


def test_a_product_whose_spill_costs_more_than_reading_again_runs_in_bands(con):
    cur, a, b = tensors(con, WIDE)
    cur.execute("SET memory_limit = '2MB'")  # trdb's part: 1 MB, less than the product
    plan = explain(cur, PRODUCT)
    assert top(plan) == "UnionAllExec" and plan.count("HashAggregateExec") >= 2, plan
    bands = int(plan.split("UnionAllExec(")[1].split(" bands)")[0])
    assert bands == plan.count("HashAggregateExec") and bands == plan.count("TensorScanExec(B"), plan
    # each band is a contiguous range of A.i, printed as one (the filter keeps the set: exact estimates)
    assert "FilterExec(i BETWEEN 0 AND " in plan and "IN (" not in plan and not spilling(plan), plan
    cur.execute("CREATE TENSOR C AS " + PRODUCT)
    cur.execute("SET memory_limit = '1GB'")
    np.testing.assert_allclose(dense(cur, "C"), a @ b, rtol=1e-4, atol=1e-3)


def test_a_band_of_the_right_input_when_its_key_is_grouped_first(con):
    cur, a, b = tensors(con, WIDE)
    cur.execute("SET memory_limit = '2MB'")
    query = "SELECT B.j, A.i, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY B.j, A.i"
    plan = explain(cur, query)
    assert top(plan) == "UnionAllExec" and "FilterExec(j BETWEEN 0 AND " in plan, plan
    got = cur.execute(query).fetchall()
    product, t = a @ b, WIDE[3]
    assert len(got) == WIDE[0] * WIDE[2]
    for j, i, tile in got:
        np.testing.assert_allclose(tile, product[i * t:(i + 1) * t, j * t:(j + 1) * t], rtol=1e-4, atol=1e-3)


def test_a_product_whose_rereads_cost_more_than_its_spill_spills(con):
    cur, a, b = tensors(con, DEEP)
    cur.execute("SET memory_limit = '2MB'")
    plan = explain(cur, PRODUCT)
    assert "UnionAllExec" not in plan and top(plan).startswith("HashAggregateExec"), plan
    aggregate = next(line for line in plan.splitlines() if "HashAggregateExec" in line)
    assert "spill=13.1MB" in aggregate, plan  # every product's partial sum (200 of 64 KB), written once
    cur.execute("CREATE TENSOR C AS " + PRODUCT)
    cur.execute("SET memory_limit = '1GB'")
    np.testing.assert_allclose(dense(cur, "C"), a @ b, rtol=1e-4, atol=1e-3)


def test_a_product_that_fits_is_one_aggregate(con):
    cur, _, _ = tensors(con, DEEP)
    plan = explain(cur, PRODUCT)
    assert "UnionAllExec" not in plan and top(plan).startswith("HashAggregateExec") and not spilling(plan), plan


def test_a_memory_limit_of_one_byte_plans_no_bands_and_still_answers():
    """A fuzz finding: SET memory_limit = 1 left the planner a budget of 0, and banding divided by it
    (InternalError: ZeroDivisionError); now no band is planned, and the product spills as it must."""
    with trdb.connect(workers=1, dense_einsum_bytes=0) as con:
        cur, a, b = tensors(con, (4, 2, 4, 16))
        cur.execute("SET memory_limit = 1")
        np.testing.assert_allclose(cur.execute(PRODUCT).fetch_tensor(), a @ b, rtol=1e-4, atol=1e-4)
