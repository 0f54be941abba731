"""constant_folding drops a product by 1 of the other factor's own type (a gradient's constant seed makes them),
and keeps a product that changes the type or the value."""
from __future__ import annotations

import numpy as np
import pytest


def plan_of(cur, query: str) -> str:
    return "\n".join(row[0] for row in cur.execute("EXPLAIN " + query).fetchall())


@pytest.mark.parametrize("factor,value,dropped", [
    ("CAST(1 AS float32)", np.float32(1), True), ("1", 1, True), ("CAST(1 AS float64)", np.float64(1), False),
    ("1.5", 1.5, False), ("CAST(0 AS float32)", np.float32(0), False)])
def test_a_unit_factor_of_the_product_s_own_type_is_dropped(cur, factor, value, dropped):
    values = np.random.default_rng(2).standard_normal((8, 8)).astype(np.float32)
    cur.execute("CREATE TENSOR A FROM ? TILE (4, 4)", [values])
    for query in (f"SELECT A.i, A.j, A.v * {factor} AS v FROM A", f"SELECT A.i, A.j, {factor} * A.v AS v FROM A"):
        assert ("*" not in plan_of(cur, query)) == dropped
        got = cur.execute(query).fetch_tensor()
        expected = values * value  # a literal is weak, a cast constant has its dtype (numpy's promotion)
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
