"""IS NOT NULL on a column that is never NULL is dropped (predicate_pushdown with optimizer/nullability.py)."""
from __future__ import annotations

import numpy as np

from helpers.mlp_views import create_mlp_views


def _plan(cur, query: str) -> str:
    return "\n".join(row[0] for row in cur.execute("EXPLAIN " + query).fetchall())


def _tensors(cur):
    cur.execute("CREATE TENSOR A FROM ? TILE (2, 2)", [np.arange(16, dtype=np.float32).reshape(4, 4)])
    cur.execute("CREATE TENSOR B FROM ? TILE (2, 2)", [np.ones((2, 4), dtype=np.float32)])


def test_a_tensor_key_is_never_null_so_its_test_goes(cur):
    _tensors(cur)
    query = "SELECT A.i, A.j, A.v FROM A WHERE A.i IS NOT NULL AND A.j IS NOT NULL"
    assert "FilterExec" not in _plan(cur, query)
    assert len(cur.execute(query).fetchall()) == 4


def test_the_missing_side_of_an_outer_join_keeps_its_test(cur):
    _tensors(cur)
    cur.execute("SET disabled_rules = 'outer_join_elimination'")  # it would make the join INNER first
    query = "SELECT A.i, A.j, B.v FROM A LEFT JOIN B ON A.i = B.i AND A.j = B.j WHERE B.i IS NOT NULL"
    assert "IS NOT NULL" in _plan(cur, query)
    assert sorted((i, j) for i, j, _ in cur.execute(query).fetchall()) == [(0, 0), (0, 1)]
    inner = "SELECT A.i, A.j, B.v FROM A JOIN B ON A.i = B.i AND A.j = B.j WHERE B.i IS NOT NULL"
    assert "FilterExec" not in _plan(cur, inner)


def test_the_gradient_of_the_mlp_tests_no_lineage_it_takes_from_tensors(cur):
    rng = np.random.default_rng(0)
    for name, shape, tile in (("X", (8, 4), (4, 4)), ("W1", (4, 4), (4, 4)), ("W2", (4, 1), (4, 1)),
                              ("Y", (8, 1), (4, 1))):
        cur.execute(f"CREATE TENSOR {name} FROM ? TILE {tile}", [rng.standard_normal(shape, dtype=np.float32)])
    create_mlp_views(cur)
    plan = _plan(cur, "SELECT * FROM GRAD(loss, W1)")
    assert "FilterExec" not in plan
    # the forward X @ W1 (shared, once) and H @ W2, each a projection: every group has one tile product
    assert plan.count("MATMUL(v, v#2)") == 2
