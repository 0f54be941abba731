"""kernel_fusion takes a Project's MATMUL into the SUM above it (no product tile is made or moved)."""
from __future__ import annotations

import numpy as np

QUERY = ("SELECT p.i, p.j, SUM(p.v) AS v FROM (SELECT A.i AS i, B.j AS j, {kernel} AS v FROM A JOIN B ON A.j = B.i) "
         "AS p GROUP BY p.i, p.j")


def _tensors(cur):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((8, 12), dtype=np.float32), rng.standard_normal((12, 4), dtype=np.float32)
    cur.execute("CREATE TENSOR A FROM ? TILE (4, 4)", [a])
    cur.execute("CREATE TENSOR B FROM ? TILE (4, 4)", [b])
    cur.execute("SET workers = 1")
    cur.execute("SET dense_einsum_bytes = 0")  # tile products (no DenseEinsum: dense_products)
    return a, b


def test_a_sum_of_projected_products_becomes_one_product_sum(cur):
    a, b = _tensors(cur)
    query = QUERY.format(kernel="MATMUL(A.v, B.v)")
    plan = [row[0] for row in cur.execute("EXPLAIN " + query).fetchall()]
    assert "SUM(MATMUL(" in plan[0] and not any("ProjectExec" in line and "MATMUL" in line for line in plan)
    np.testing.assert_allclose(cur.execute(query).fetch_tensor(), a @ b, rtol=1e-5, atol=1e-5)
    cur.execute("SET disabled_rules = 'kernel_fusion'")
    plan = [row[0] for row in cur.execute("EXPLAIN " + query).fetchall()]
    assert any("ProjectExec" in line and "MATMUL" in line for line in plan)


def test_other_kernels_stay_in_the_project(cur):
    _tensors(cur)
    plan = "\n".join(row[0] for row in cur.execute("EXPLAIN " + QUERY.format(kernel="A.v * 2")).fetchall())
    assert "ProjectExec" in plan and "SUM(v)" in plan
