"""outer_join_elimination: outer joins feeding only products become inner joins, results unchanged as tensors."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import trdb
from trdb.optimizer.rules.outer_join_elimination import vanishes
from trdb.plan import expressions as bx
from trdb.plan.types import TensorType

RULE = "outer_join_elimination"
KEYS = "ON X.i = Y.i AND X.j = Y.j"
CO = "COALESCE(X.i, Y.i) AS i, COALESCE(X.j, Y.j) AS j"


@pytest.fixture(scope="module")
def cur():
    rng = np.random.default_rng(7)
    # 40 x 30 with 8 x 8 tiles: ragged edge tiles; each side has tiles the other lacks
    x = np.zeros((40, 30), np.float32)
    x[:16, :] = rng.normal(size=(16, 30))
    x[30:, 20:] = 1.5
    y = np.zeros((40, 30), np.float32)
    y[10:, :10] = rng.normal(size=(30, 10))
    y[:, 25:] = 2.0
    w = rng.normal(size=(30, 30)).astype(np.float32)
    w[8:16, :] = 0
    con = trdb.connect()
    c = con.cursor()
    # sparse on purpose (scipy.sparse: its zero tiles are absent; a dense array's would be present values)
    c.execute("CREATE TENSOR X FROM ? TILE (8, 8)", [scipy.sparse.csr_matrix(x)])
    c.execute("CREATE TENSOR Y FROM ? TILE (8, 8)", [scipy.sparse.csr_matrix(y)])
    c.execute("CREATE TENSOR W FROM ? TILE (8, 8)", [scipy.sparse.csr_matrix(w)])
    yield c
    con.close()


def _explain(cur, query: str, disabled: str = "") -> str:
    cur.execute(f"SET disabled_rules = '{disabled}'")
    cur.execute("EXPLAIN " + query)
    return "\n".join(row[0] for row in cur.fetchall())


def _tensor(cur, query: str, disabled: str, shape=None):
    cur.execute(f"SET disabled_rules = '{disabled}'")
    cur.execute(query)
    return cur.fetch_tensor(shape) if shape else cur.fetch_tensor()


def _same(cur, query: str, shape=None) -> None:
    for workers in (1, 2):
        cur.execute(f"SET workers = {workers}")
        with_rule = _tensor(cur, query, "", shape)
        without = _tensor(cur, query, RULE, shape)
        np.testing.assert_allclose(with_rule, without, rtol=1e-5, atol=1e-6, err_msg=query)
    cur.execute("RESET workers")


APPLIES = [
    # (query, join kind after the rule)
    (f"SELECT X.i, X.j, X.v * Y.v AS v FROM X LEFT JOIN Y {KEYS}", "INNER"),
    (f"SELECT {CO}, X.v * Y.v AS v FROM X FULL JOIN Y {KEYS}", "INNER"),
    (f"SELECT {CO}, RELU(X.v * Y.v) * 2 AS v FROM X FULL JOIN Y {KEYS}", "INNER"),
    (f"SELECT {CO}, -ABS(TRANSPOSE(Y.v * X.v, 0, 1) / 4) AS v FROM X FULL JOIN Y {KEYS}", None),
    (f"SELECT {CO}, TANH(X.v) * SQUARE(Y.v) - X.v * Y.v AS v FROM X FULL JOIN Y {KEYS}", "INNER"),
    (f"SELECT X.i, X.j, EINSUM('ab,ab->ab', X.v, Y.v) AS v FROM X LEFT JOIN Y {KEYS}", "INNER"),
    # filters on keys between the projection and the join
    (f"SELECT X.i, X.j, X.v * Y.v AS v FROM X LEFT JOIN Y {KEYS} WHERE X.i < 4 AND Y.i IS NOT NULL", "INNER"),
    (f"SELECT X.i, X.j, X.v * Y.v AS v FROM X LEFT JOIN Y {KEYS} WHERE Y.i IS NULL", "INNER"),
    # one side vanishes: FULL -> LEFT (or swapped into a LEFT)
    (f"SELECT {CO}, X.v * 3 AS v FROM X FULL JOIN Y {KEYS}", "LEFT"),
    (f"SELECT {CO}, RELU(Y.v) AS v FROM X FULL JOIN Y {KEYS}", "LEFT"),
    # a SUM grouped by keys above the products
    (f"SELECT COALESCE(X.i, Y.i) AS i, SUM(REDUCE_SUM(X.v * Y.v)) AS v FROM X FULL JOIN Y {KEYS} "
     "GROUP BY COALESCE(X.i, Y.i)", "INNER"),
    # through a subquery
    (f"SELECT S.i, S.j, S.v * 2 AS v FROM (SELECT {CO}, X.v * Y.v AS v FROM X FULL JOIN Y {KEYS}) AS S", "INNER"),
]

NOT_APPLIED = [
    f"SELECT {CO}, X.v + Y.v AS v FROM X FULL JOIN Y {KEYS}",
    f"SELECT X.i, X.j, X.v + Y.v AS v FROM X LEFT JOIN Y {KEYS}",
    f"SELECT X.i, X.j, EXP(X.v * Y.v) AS v FROM X LEFT JOIN Y {KEYS}",
    f"SELECT X.i, X.j, X.v * Y.v + 1 AS v FROM X LEFT JOIN Y {KEYS}",
    f"SELECT X.i, X.j, X.v * Y.v AS p, X.v AS q FROM X LEFT JOIN Y {KEYS}",
    f"SELECT X.i, X.j, X.v / Y.v AS v FROM X LEFT JOIN Y {KEYS}",
    f"SELECT {CO}, X.v * Y.v - 1 AS v FROM X FULL JOIN Y {KEYS}",
    # the subquery's zero tiles are read by a kernel that does not vanish
    f"SELECT S.i, S.j, S.v + 1 AS v FROM (SELECT X.i, X.j, X.v * Y.v AS v FROM X LEFT JOIN Y {KEYS}) AS S",
    # aggregates that count or compare tuples
    f"SELECT X.i, AVG(REDUCE_SUM(X.v * Y.v)) AS v FROM X LEFT JOIN Y {KEYS} GROUP BY X.i",
    f"SELECT X.i, MIN(REDUCE_SUM(X.v * Y.v)) AS v FROM X LEFT JOIN Y {KEYS} GROUP BY X.i",
    f"SELECT X.i, SUM(REDUCE_SUM(X.v * Y.v)) AS v, COUNT(*) AS n FROM X LEFT JOIN Y {KEYS} GROUP BY X.i",
    f"SELECT X.i, X.j, X.v * Y.v AS v FROM X LEFT JOIN Y {KEYS} ORDER BY i, j LIMIT 5",
]

KEYS_ONLY_OR_COUNT = [
    f"SELECT X.i, X.j FROM X LEFT JOIN Y {KEYS}",
    f"SELECT COUNT(*) AS n FROM (SELECT X.i, X.v * Y.v AS v FROM X LEFT JOIN Y {KEYS}) AS S",
    f"SELECT S.i, COUNT(*) AS n FROM (SELECT X.i, X.v * Y.v AS v FROM X LEFT JOIN Y {KEYS}) AS S GROUP BY S.i",
]


@pytest.mark.parametrize("query,kind", APPLIES)
def test_rule_applies_and_keeps_the_tensor(cur, query: str, kind) -> None:
    with_rule, without = _explain(cur, query), _explain(cur, query, RULE)
    assert with_rule != without
    assert "LEFT" in without or "FULL" in without
    if kind:
        assert f"HashJoinExec({kind}" in with_rule, with_rule
    _same(cur, query)


@pytest.mark.parametrize("query", NOT_APPLIED)
def test_rule_does_not_apply(cur, query: str) -> None:
    assert _explain(cur, query) == _explain(cur, query, RULE)
    _same(cur, query)


@pytest.mark.parametrize("query", KEYS_ONLY_OR_COUNT)
def test_keys_and_counts_see_every_tuple(cur, query: str) -> None:
    assert _explain(cur, query) == _explain(cur, query, RULE)
    results = []
    for disabled in ("", RULE):
        cur.execute(f"SET disabled_rules = '{disabled}'")
        cur.execute(query)
        results.append(sorted(tuple(np.asarray(v).item() if isinstance(v, np.ndarray) else v for v in row)
                              for row in cur.fetchall()))
    assert results[0] == results[1]


def test_swapped_full_join_keeps_columns_in_order(cur) -> None:
    query = f"SELECT {CO}, Y.v * 3 AS v, X.j AS xj FROM X FULL JOIN Y {KEYS}"
    plan = _explain(cur, query)
    assert "FULL" not in plan and "LEFT" in plan
    for disabled in ("", RULE):
        cur.execute(f"SET disabled_rules = '{disabled}'")
        cur.execute(query)
        assert [d[0] for d in cur.description] == ["i", "j", "v", "xj"]
    query = f"SELECT {CO}, Y.v * 3 AS v FROM X FULL JOIN Y {KEYS}"
    assert "FULL" not in _explain(cur, query)
    _same(cur, query)


def test_absent_tiles_on_either_side_match_dense_numpy(cur) -> None:
    x = _tensor(cur, "SELECT X.i, X.j, X.v FROM X", "")
    y = _tensor(cur, "SELECT Y.i, Y.j, Y.v FROM Y", "")
    got = _tensor(cur, f"SELECT {CO}, X.v * Y.v AS v FROM X FULL JOIN Y {KEYS}", "", (40, 30))
    np.testing.assert_allclose(got, x * y, rtol=1e-6)
    w = _tensor(cur, "SELECT W.i, W.j, W.v FROM W", "", (30, 30))
    # W lacks a row of tiles: without the rule the unmatched tuples have a NULL W.j and no place
    query = "SELECT X.i, W.j, SUM(MATMUL(X.v, W.v)) AS v FROM X LEFT JOIN W ON X.j = W.i GROUP BY X.i, W.j"
    assert "HashJoinExec(INNER" in _explain(cur, query)
    np.testing.assert_allclose(_tensor(cur, query, "", (40, 30)), x @ w, rtol=1e-4, atol=1e-4)


def test_cte_read_twice_is_not_dropped(cur) -> None:
    # the CTE is computed once as a shared subplan, apart from the `+ 1` that reads its zero tiles
    query = (f"WITH S AS (SELECT X.i, X.j, X.v * Y.v AS v FROM X LEFT JOIN Y {KEYS}) "
             "SELECT P.i, P.j, P.v + Q.v + 1 AS v FROM S AS P JOIN S AS Q ON P.i = Q.i AND P.j = Q.j")
    _same(cur, query)


def test_update_keeps_zero_tiles_apart_from_absent_ones() -> None:
    results = []
    for disabled in ("", RULE):
        con = trdb.connect()
        c = con.cursor()
        c.execute(f"SET disabled_rules = '{disabled}'")
        c.execute("CREATE TENSOR T SHAPE (16, 16) TILE (8, 8) FILL ONES")
        c.execute("CREATE TENSOR A SHAPE (16, 16) TILE (8, 8) FILL ONES")
        c.execute("CREATE TENSOR B SHAPE (16, 16) TILE (8, 8) FILL CONSTANT(2)")
        c.execute("DELETE FROM B WHERE B.i = 0")
        c.execute("UPDATE T SET v = T.v * S.v FROM (SELECT A.i, A.j, A.v * B.v AS v FROM A LEFT JOIN B "
                  "ON A.i = B.i AND A.j = B.j) AS S WHERE T.i = S.i AND T.j = S.j")
        c.execute("SELECT T.i, T.j, T.v FROM T")
        results.append(c.fetch_tensor((16, 16)))
        con.close()
    np.testing.assert_array_equal(results[0], results[1])


def test_vanishes_predicate() -> None:
    t = TensorType(np.dtype("float32"), (8, 8), (None, None))
    x, y = bx.ColumnIndex(0, t), bx.ColumnIndex(1, t)
    from trdb.catalog.functions import FUNCTIONS, OPERATORS

    def call(name, *args):
        function = OPERATORS.get(name) or FUNCTIONS[name]
        return bx.Call(function, tuple(args), t)

    zero_y = frozenset({1})
    assert vanishes(call("*", x, y), zero_y)
    assert vanishes(call("MATMUL", y, x), zero_y)
    assert vanishes(call("RELU", call("*", x, y)), zero_y)
    assert vanishes(call("*", call("RELU", call("*", x, y)), bx.Const(2, t)), zero_y)
    assert vanishes(call("REDUCE_MAX", y), zero_y)
    assert vanishes(call("*", x, bx.Const(0.0, t)), frozenset())
    assert not vanishes(call("+", x, y), zero_y)
    assert vanishes(call("+", y, call("*", x, y)), zero_y)
    assert not vanishes(call("EXP", call("*", x, y)), zero_y)
    assert not vanishes(call("+", call("*", x, y), bx.Const(1, t)), zero_y)
    assert not vanishes(call("SIGMOID", y), zero_y)
    assert not vanishes(call("/", x, y), zero_y)
    assert vanishes(call("/", y, bx.Const(2, t)), zero_y)
    assert not vanishes(call("/", y, bx.Const(0, t)), zero_y)
    assert not vanishes(bx.Coalesce((x, y)), zero_y)

