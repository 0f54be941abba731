"""An aggregate whose groups have one tuple each is a projection (single_row_groups, optimizer/group_sizes.py)."""
from __future__ import annotations

import numpy as np
import pytest

from helpers.mlp_views import create_mlp_views
from trdb.optimizer.group_sizes import KeySlots, key_slots
from trdb.plan import logical as lp


def _plan(cur, query: str) -> str:
    return "\n".join(row[0] for row in cur.execute("EXPLAIN " + query).fetchall())


def _both_ways(cur, query: str) -> tuple:
    with_rule = cur.execute(query).fetch_tensor()
    cur.execute("SET disabled_rules = 'single_row_groups'")
    without = cur.execute(query).fetch_tensor()
    cur.execute("RESET disabled_rules")
    return with_rule, without


@pytest.fixture
def tensors(cur):
    rng = np.random.default_rng(7)
    arrays = {"A": rng.standard_normal((64, 32), dtype=np.float32),   # one column of tiles
              "B": rng.standard_normal((32, 24), dtype=np.float32),   # one row of tiles, three columns
              "C": rng.standard_normal((32, 24), dtype=np.float32)}
    for name, tile in (("A", (16, 32)), ("B", (32, 8)), ("C", (16, 8))):
        cur.execute(f"CREATE TENSOR {name} FROM ? TILE {tile}", [arrays[name]])
    cur.execute("CREATE TENSOR P FROM ? TILE (16, 16)", [arrays["A"]])  # A in two columns of tiles
    cur.execute("SET dense_einsum_bytes = 0")  # tile products (no DenseEinsum: dense_products)
    return arrays


def test_a_product_with_one_tile_along_k_is_a_projection_with_numpy_s_result(cur, tensors):
    query = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"
    plan = _plan(cur, query)
    assert "HashAggregateExec" not in plan and "MATMUL(v, v#2)" in plan
    with_rule, without = _both_ways(cur, query)
    np.testing.assert_array_equal(with_rule, without)
    np.testing.assert_allclose(with_rule, tensors["A"] @ tensors["B"], rtol=1e-5, atol=1e-5)


def test_groups_of_two_tuples_keep_their_aggregate(cur, tensors):
    query = "SELECT P.i, C.j, SUM(MATMUL(P.v, C.v)) AS v FROM P JOIN C ON P.j = C.i GROUP BY P.i, C.j"
    assert "HashAggregateExec(group by [i, j] (complete at 2 tuples)" in _plan(cur, query)
    np.testing.assert_allclose(cur.execute(query).fetch_tensor(), tensors["A"] @ tensors["C"], rtol=1e-5,
                               atol=1e-5)
    # grouped by a key that leaves one of three tiles free: three tuples a group (one worker: no partial sums)
    cur.execute("SET workers = 1")
    assert "complete at 3 tuples" in _plan(cur, "SELECT B.i, SUM(B.v) AS v FROM B GROUP BY B.i")


def test_min_and_max_of_one_tuple_are_its_value_but_count_and_avg_stay(cur, tensors):
    query = "SELECT B.i, B.j, MIN(B.v) AS lo, MAX(B.v * 2) AS hi FROM B GROUP BY B.i, B.j"
    assert "HashAggregateExec" not in _plan(cur, query)
    rows = sorted(cur.execute(query).fetchall(), key=lambda r: (r[0], r[1]))
    for i, j, lo, hi in rows:
        np.testing.assert_array_equal(lo, tensors["B"][:, 8 * j:8 * j + 8])
        np.testing.assert_array_equal(hi, 2 * tensors["B"][:, 8 * j:8 * j + 8])
    for call in ("COUNT(B.v)", "AVG(B.v)"):
        assert "HashAggregateExec" in _plan(cur, f"SELECT B.i, B.j, {call} AS c FROM B GROUP BY B.i, B.j")


def test_an_aggregate_s_group_keys_are_unique_through_a_join_and_a_subquery(cur, tensors):
    # S has one tuple per A.i (its group key); joined on it, each (i) group of the outer query has one tuple
    query = ("SELECT A.i, SUM(A.v * S.v) AS v FROM A JOIN (SELECT A.i, SUM(A.v) AS v FROM A GROUP BY A.i) AS S "
             "ON A.i = S.i GROUP BY A.i")
    plan = _plan(cur, query)
    assert plan.count("HashAggregateExec") == 0  # the inner one too: A has one column of tiles
    with_rule, without = _both_ways(cur, query)
    np.testing.assert_array_equal(with_rule, without)
    np.testing.assert_allclose(with_rule, tensors["A"] * tensors["A"], rtol=1e-6)


def test_an_outer_join_or_a_computed_key_gives_no_bound(cur, tensors):
    left = "SELECT A.i, SUM(A.v) AS v FROM A LEFT JOIN B ON A.j = B.j GROUP BY A.i"
    cur.execute("SET disabled_rules = 'outer_join_elimination'")
    assert "HashAggregateExec" in _plan(cur, left)
    cur.execute("RESET disabled_rules")
    computed = "SELECT A.i + 0 AS k, SUM(A.v) AS v FROM A GROUP BY A.i + 0"
    assert "HashAggregateExec" in _plan(cur, computed)
    assert len(cur.execute(computed).fetchall()) == 4


def test_key_slots_merge_on_a_join_and_hide_dropped_keys():
    class Tensor:
        grid = (4, 2)
        keys = ("i", "j")

    scan = lp.TensorScan.__new__(lp.TensorScan)
    object.__setattr__(scan, "tensor", Tensor())
    object.__setattr__(scan, "schema", (None, None, None))
    join = lp.Join.__new__(lp.Join)
    for name, value in (("left", scan), ("right", scan), ("kind", "INNER"), ("left_keys", (1,)),
                        ("right_keys", (0,)), ("schema", (None,) * 6), ("residual", None)):
        object.__setattr__(join, name, value)
    slots = key_slots(join, {})
    # A.i (4), A.j = B.i (min(2, 4) = 2), B.j (2); B.i at position 3 is the slot of A.j
    assert slots == KeySlots((4, 2, 2), {0: 0, 1: 1, 3: 1, 4: 2})


def test_the_mlp_gradient_s_backward_products_of_one_tile_are_projections(cur):
    rng = np.random.default_rng(0)
    arrays = {"X": rng.standard_normal((64, 32), dtype=np.float32), "W1": rng.standard_normal((32, 32), dtype=np.float32),
              "W2": rng.standard_normal((32, 1), dtype=np.float32), "Y": rng.standard_normal((64, 1), dtype=np.float32)}
    for name, tile in (("X", (16, 16)), ("W1", (16, 16)), ("W2", (16, 1)), ("Y", (16, 1))):
        cur.execute(f"CREATE TENSOR {name} FROM ? TILE {tile}", [arrays[name]])
    create_mlp_views(cur)
    query = "SELECT * FROM GRAD(loss, W1)"
    plan = _plan(cur, query)
    # d_out @ W2ᵀ per hidden tile (W2 has one column of tiles: one product a group), read from shared tuples
    assert "_grad2 = MATMUL(_grad2, TRANSPOSE(v, 1, 0))" in plan
    assert "SUM(MATMUL(_grad2, TRANSPOSE" not in plan
    X, W1, W2, Y = (arrays[n].astype(np.float64) for n in ("X", "W1", "W2", "Y"))
    Z = X @ W1
    d_out = 2 * (np.maximum(Z, 0) @ W2 - Y)
    expected = X.T @ ((d_out @ W2.T) * (Z > 0))
    with_rule, without = _both_ways(cur, query)
    np.testing.assert_allclose(with_rule, expected, rtol=1e-3, atol=1e-3 * np.abs(expected).max())
    np.testing.assert_allclose(with_rule, without, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
