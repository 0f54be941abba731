"""MINIMIZE WITH (clamp_min, clamp_max): each step's new values are projected onto [clamp_min, clamp_max].

An NNMF-like model (V ~ W H, W and H kept >= 0) is trained in trdb and by numpy's projected gradient steps
from the same values (SGD and Adam, as torch.optim.Adam); the parameters agree after every statement, on
the stacked step and on the tile-by-tile one (statements/parameter_stacks.py); the numpy run without the
projection goes negative, so the projection is what keeps trdb's values at or above 0. Bad options are
refused with the other options' messages.
"""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from trdb.errors import ProgrammingError
from trdb.statements import minimize

M, R, N = 8, 3, 6


def nnmf(cur, rng) -> dict:
    """V (8 x 6, non-negative, rank 3 plus noise) ~ W (8 x 3) H (3 x 6); W and H start positive, in tiles of
    several per tensor (a stack each)."""
    V = rng.uniform(0, 1, (M, R)) @ rng.uniform(0, 1, (R, N)) + rng.uniform(0, 0.1, (M, N))
    W, H = rng.uniform(0.05, 1, (M, R)), rng.uniform(0.05, 1, (R, N))
    cur.execute("CREATE TENSOR V FROM ? TILE (4, 3) DTYPE float64", [V])
    cur.execute("CREATE TENSOR W FROM ? TILE (4, 3) DTYPE float64", [W])
    cur.execute("CREATE TENSOR H FROM ? TILE (3, 3) DTYPE float64", [H])
    cur.execute("CREATE VIEW wh AS SELECT W.i, H.j, SUM(MATMUL(W.v, H.v)) AS v FROM W JOIN H ON W.j = H.i "
                "GROUP BY W.i, H.j")
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(P.v - V.v)) AS v FROM wh AS P "
                "JOIN V ON P.i = V.i AND P.j = V.j")
    return {"V": V, "W": W, "H": H}


def reference(values: dict, optimizer: str, rate: float, steps: int, low, high, state: dict) -> dict:
    """numpy's projected gradient steps of loss = |W H - V|^2 (Adam's moments carried in `state`)."""
    W, H, V = values["W"].copy(), values["H"].copy(), values["V"]
    for _ in range(steps):
        residual = W @ H - V
        grads = {"W": 2 * residual @ H.T, "H": 2 * W.T @ residual}
        new = {}
        for name, param in (("W", W), ("H", H)):
            g = grads[name]
            if optimizer == "adam":
                m, v, t = state.get(name, (np.zeros_like(g), np.zeros_like(g), 0))
                m, v, t = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g, t + 1
                state[name] = (m, v, t)
                g = (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
            new[name] = param - rate * g
            if low is not None or high is not None:
                new[name] = np.clip(new[name], low, high)
        W, H = new["W"], new["H"]
    return {"V": V, "W": W, "H": H}


CASES = [  # optimizer, rate, clamp options, (low, high)
    ("sgd", 0.05, "clamp_min = 0", (0.0, None)),
    ("adam", 0.2, "clamp_min = 0", (0.0, None)),
    ("adam", 0.2, "clamp_min = 0, clamp_max = 0.9", (0.0, 0.9)),
    ("sgd", 0.05, "clamp_max = 0.5", (None, 0.5)),
]


@pytest.mark.parametrize("stacked", [True, False], ids=["stacked", "tile_by_tile"])
@pytest.mark.parametrize("optimizer, rate, clamps, bounds", CASES)
def test_nnmf_matches_numpy_projected_steps(monkeypatch, stacked, optimizer, rate, clamps, bounds):
    taken = []
    original = minimize._stacked_update
    monkeypatch.setattr(minimize, "_stacked_update",
                        lambda *args: taken.append(original(*args)) or taken[-1] if stacked else None)
    con = trdb.connect()
    cur = con.cursor()
    values = nnmf(cur, np.random.default_rng(11))
    state: dict = {}
    expected = values
    for _ in range(3):  # three statements: the clamp holds across them, Adam's moments carry over
        cur.execute(f"MINIMIZE loss WRT (W, H) WITH (optimizer = '{optimizer}', learning_rate = {rate}, "
                    f"steps = 4, {clamps})").fetchall()
        expected = reference(expected, optimizer, rate, 4, *bounds, state)
        for name in ("W", "H"):
            got = cur.execute(f"SELECT * FROM {name}").fetch_tensor()
            np.testing.assert_allclose(got, expected[name], rtol=1e-10, atol=1e-12)
            low, high = bounds
            assert low is None or got.min() >= low
            assert high is None or got.max() <= high
    con.close()
    assert (sum(t is not None for t in taken) > 0) == stacked  # the path named ran
    # without the projection the same steps leave the bounds: the clamp is what held them
    free = reference(values, optimizer, rate, 12, None, None, {})
    low, high = bounds
    assert (low is not None and min(free["W"].min(), free["H"].min()) < low) or \
        (high is not None and max(free["W"].max(), free["H"].max()) > high)


def test_clamp_min_equal_to_clamp_max_pins_every_value(cur):
    nnmf(cur, np.random.default_rng(2))
    cur.execute("MINIMIZE loss WRT (W) WITH (learning_rate = 0.01, steps = 2, clamp_min = 0.25, clamp_max = 0.25)")
    np.testing.assert_array_equal(cur.execute("SELECT * FROM W").fetch_tensor(), np.full((M, R), 0.25))


def test_without_clamps_nothing_is_projected(cur):
    values = nnmf(cur, np.random.default_rng(11))
    cur.execute("MINIMIZE loss WRT (W, H) WITH (learning_rate = 0.05, steps = 12)")
    expected = reference(values, "sgd", 0.05, 12, None, None, {})
    assert expected["W"].min() < 0 or expected["H"].min() < 0
    np.testing.assert_allclose(cur.execute("SELECT * FROM W").fetch_tensor(), expected["W"], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("options, message", [
    ("clamp_min = 'zero'", "MINIMIZE: clamp_min must be a finite number, got 'zero'"),
    ("clamp_max = NULL", "MINIMIZE: clamp_max must be a finite number, got None"),
    ("clamp_min = TRUE", "MINIMIZE: clamp_min must be a finite number, got True"),
    ("clamp_min = 1, clamp_max = 0", "MINIMIZE: clamp_min must be at most clamp_max, got clamp_min = 1.0 and "
                                     "clamp_max = 0.0"),
])
def test_bad_clamps_are_refused_and_nothing_steps(cur, options, message):
    values = nnmf(cur, np.random.default_rng(5))
    with pytest.raises(ProgrammingError, match=message.replace(".", r"\.")):
        cur.execute(f"MINIMIZE loss WRT (W) WITH (steps = 2, {options})")
    np.testing.assert_array_equal(cur.execute("SELECT * FROM W").fetch_tensor(), values["W"])


def test_a_misspelt_clamp_gets_a_hint(cur):
    nnmf(cur, np.random.default_rng(5))
    with pytest.raises(ProgrammingError, match='unknown option "clamp_mn"') as raised:
        cur.execute("MINIMIZE loss WRT (W) WITH (clamp_mn = 0)")
    assert "clamp_min" in str(raised.value)


@pytest.mark.parametrize("stacked", [True, False], ids=["stacked", "tile_by_tile"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_float32_parameter_is_clipped_to_the_bound_in_its_dtype(monkeypatch, stacked, optimizer):
    if not stacked:
        monkeypatch.setattr(minimize, "_stacked_update", lambda *args: None)
    con = trdb.connect()
    cur = con.cursor()
    rng = np.random.default_rng(7)
    cur.execute("CREATE TENSOR V FROM ? TILE (4, 3)", [rng.uniform(0, 1, (M, N)).astype(np.float32)])
    cur.execute("CREATE TENSOR W FROM ? TILE (4, 3)", [rng.uniform(0.3, 1, (M, R)).astype(np.float32)])
    cur.execute("CREATE TENSOR H FROM ? TILE (3, 3)", [rng.uniform(0.3, 1, (R, N)).astype(np.float32)])
    cur.execute("CREATE VIEW wh AS SELECT W.i, H.j, SUM(MATMUL(W.v, H.v)) AS v FROM W JOIN H ON W.j = H.i "
                "GROUP BY W.i, H.j")
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(P.v - V.v)) AS v FROM wh AS P JOIN V ON P.i = V.i AND P.j = V.j")
    cur.execute(f"MINIMIZE loss WRT (W, H) WITH (optimizer = '{optimizer}', learning_rate = 0.1, steps = 10, "
                "clamp_min = 0.3)")
    W = cur.execute("SELECT * FROM W").fetch_tensor()
    con.close()
    assert W.dtype == np.float32 and W.min() >= np.float32(0.3)
    assert (W == np.float32(0.3)).any()  # the bound was reached: values were clipped to it
