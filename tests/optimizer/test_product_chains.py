"""product_chains: A·(X·W), written as joins and SUMs, runs as (A·X)·W where X has fewer columns than W, with the
tuples and values of the written order, for queries, GRADs and MINIMIZE; and not where it would be wider."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import trdb

CHAIN = ("SELECT A.i, q.j, SUM(MATMUL(A.v, q.v)) AS v FROM A JOIN "
         "(SELECT X.i, W.j, SUM(MATMUL(X.v, W.v)) AS v FROM X JOIN W ON X.j = W.i GROUP BY X.i, W.j) AS q "
         "ON A.j = q.i GROUP BY A.i, q.j")
LOSS = f"CREATE VIEW chain_loss AS SELECT SUM(SUMSQ(c.v)) AS v FROM ({CHAIN}) AS c"


def _arrays(x_columns: int, w_columns: int):
    rng = np.random.default_rng(11)
    a = scipy.sparse.random(70, 60, density=0.05, random_state=5, dtype=np.float32).toarray()
    a[32:64, :] = 0  # the second row of tiles: deleted below (absent, zeros)
    x = rng.standard_normal((60, x_columns), dtype=np.float32)
    w = rng.standard_normal((x_columns, w_columns), dtype=np.float32)
    return a, x, w


@pytest.fixture(params=[1, 2], ids=["workers1", "workers2"])
def cur(request):
    con = trdb.connect(workers=request.param)
    cur = con.cursor()
    cur.execute("SET min_parallel_cost = 0")  # exchanges at two workers, even for these small plans
    yield cur
    con.close()


def _store(cur, a, x, w, sparse: bool = True) -> None:
    cur.execute("CREATE OR REPLACE TENSOR A FROM ? TILE (32, 25)", [scipy.sparse.csr_array(a) if sparse else a])
    cur.execute("CREATE OR REPLACE TENSOR X FROM ? TILE (25, 16)", [x])  # edge tiles: 60 = 2 * 25 + 10, ...
    cur.execute("CREATE OR REPLACE TENSOR W FROM ? TILE (16, 16)", [w])
    cur.execute("DELETE FROM A WHERE A.i = 1")


def _depths(cur, query: str) -> dict:
    """How deep each tensor's scan lies in the plan EXPLAIN prints."""
    depths = {}
    for line in (row[0] for row in cur.execute("EXPLAIN " + query).fetchall()):
        for name in ("A", "X", "W"):
            if f"TensorScanExec({name}," in line:
                depths[name] = len(line) - len(line.lstrip())
    return depths


def _tiles(cur, query: str, disabled: str = "") -> dict:
    cur.execute(f"SET disabled_rules = '{disabled}'")
    try:
        return {tuple(row[:-1]): row[-1] for row in cur.execute(query).fetchall()}
    finally:
        cur.execute("RESET disabled_rules")


def _assert_same_tiles(got: dict, expected: dict) -> None:
    assert sorted(got) == sorted(expected)
    for key, tile in expected.items():
        assert got[key].shape == tile.shape and got[key].dtype == tile.dtype
        np.testing.assert_allclose(got[key], tile, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("sparse", [True, False], ids=["csr", "dense"])
def test_a_chain_narrower_by_x_runs_as_a_x_then_w_with_the_written_order_s_tuples(cur, sparse):
    a, x, w = _arrays(20, 40)
    _store(cur, a, x, w, sparse)
    depths = _depths(cur, CHAIN)
    assert depths["X"] > depths["W"]  # A and X are joined first; W beside their product
    cur.execute("SET disabled_rules = 'product_chains'")
    written = _depths(cur, CHAIN)
    cur.execute("RESET disabled_rules")
    assert written.get("X") == written.get("W")  # X and W multiplied first, as written (at two workers: whole)
    ours, theirs = _tiles(cur, CHAIN), _tiles(cur, CHAIN, "product_chains")
    _assert_same_tiles(ours, theirs)
    assert {i for i, _ in ours} == {0, 2}  # no tuple for the absent row of tiles
    np.testing.assert_allclose(cur.execute(CHAIN).fetch_tensor(), a.astype(np.float64) @ x @ w, rtol=1e-4, atol=1e-4)


def test_a_chain_wider_by_x_stays_as_written(cur):
    a, x, w = _arrays(40, 20)
    _store(cur, a, x, w)
    depths = _depths(cur, CHAIN)
    assert depths.get("X") == depths.get("W")
    np.testing.assert_allclose(cur.execute(CHAIN).fetch_tensor(), a.astype(np.float64) @ x @ w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("param", ["W", "X"])
def test_gradients_through_a_reassociated_chain_are_the_written_order_s(cur, param):
    a, x, w = _arrays(20, 40)
    _store(cur, a, x, w)
    cur.execute(LOSS)
    query = f"SELECT * FROM GRAD(chain_loss, {param})"
    ours, theirs = _tiles(cur, query), _tiles(cur, query, "product_chains")
    _assert_same_tiles(ours, theirs)
    a64, x64, w64 = (m.astype(np.float64) for m in (a, x, w))
    out = a64 @ x64 @ w64  # loss = sum(out^2): d/dW = 2 (AX)^T out, d/dX = 2 A^T out W^T
    expected = 2 * (a64 @ x64).T @ out if param == "W" else 2 * a64.T @ out @ w64.T
    np.testing.assert_allclose(cur.execute(query).fetch_tensor(), expected, rtol=1e-3, atol=1e-3)


def test_the_gradient_against_central_differences(cur):
    a, x, w = _arrays(20, 40)
    _store(cur, a, x, w)
    cur.execute(LOSS)
    gradient = cur.execute("SELECT * FROM GRAD(chain_loss, W)").fetch_tensor()
    a64, x64, w64 = (m.astype(np.float64) for m in (a, x, w))
    step = 1e-3
    for r, c in [(0, 0), (5, 17), (19, 39)]:
        plus, minus = w64.copy(), w64.copy()
        plus[r, c] += step
        minus[r, c] -= step
        numeric = (np.sum((a64 @ x64 @ plus) ** 2) - np.sum((a64 @ x64 @ minus) ** 2)) / (2 * step)
        assert gradient[r, c] == pytest.approx(numeric, rel=1e-3, abs=1e-2)


def test_minimize_through_a_reassociated_chain_trains_as_the_written_order(cur):
    a, x, w = _arrays(20, 40)
    trained = {}
    for disabled in ("", "product_chains"):
        _store(cur, a, x, w)
        cur.execute(LOSS if disabled == "" else LOSS.replace("CREATE VIEW", "CREATE OR REPLACE VIEW"))
        cur.execute(f"SET disabled_rules = '{disabled}'")
        losses = [loss for _, loss in cur.execute("MINIMIZE chain_loss WRT (W) WITH (optimizer = 'adam', "
                                                   "learning_rate = 0.01, steps = 4)").fetchall()]
        trained[disabled] = losses, cur.execute("SELECT * FROM W").fetch_tensor()
        cur.execute("RESET disabled_rules")
    np.testing.assert_allclose(trained[""][0], trained["product_chains"][0], rtol=1e-4)
    np.testing.assert_allclose(trained[""][1], trained["product_chains"][1], rtol=1e-4, atol=1e-5)
    assert trained[""][0][-1] < trained[""][0][0]
