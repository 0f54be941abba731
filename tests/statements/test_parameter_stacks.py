"""MINIMIZE's step on stacks (statements/parameter_stacks.py) gives the values of the tile-by-tile step.

Each model runs twice from the same data: once as it runs, once with the stacked step turned off; the
losses and the parameters (and Adam's moments) after several steps, across statements, must agree to the
last bits. The
models cover embeddings a gradient reaches only in part (the rest step with a zero gradient), a
parameter of one tile, a parameter with edge tiles (no stack: tile by tile), SGD in float32, and weights
in tiles too large for a column batch.
"""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from trdb.statements import minimize
from trdb.statements.parameter_stacks import stored_stack
from trdb.storage.tile_runs import TileRuns, tile_views


def embedding_model(con, rng, entities=40, pairs=25, tile=(1, 8)) -> None:
    """Rows of E paired by a table; with tiles of several rows, a tile is paired with itself (edge tiles of
    two shapes never meet)."""
    con.execute(f"CREATE TENSOR E FROM ? TILE {tile} DTYPE float64", [rng.standard_normal((entities, 8)) * 0.1])
    con.execute("CREATE TABLE pairs (h BIGINT, t BIGINT)")
    # entities past 30 never appear: their gradient tiles are absent, and under Adam they still step
    for h, t in zip(rng.integers(0, 30, pairs).tolist(), rng.integers(0, 30, pairs).tolist()):
        con.execute("INSERT INTO pairs VALUES (?, ?)", [h, t])
    con.execute("CREATE TENSOR w FROM ? TILE (1, 8) DTYPE float64", [rng.standard_normal((1, 8))])
    con.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(H.v * w.v - U.v)) AS v FROM pairs AS P "
                f"JOIN E AS H ON H.i = P.h JOIN E AS U ON U.i = P.{'t' if tile[0] == 1 else 'h'} JOIN w ON w.i = 0")


def trained(monkeypatch, stacked: bool, options: str, tile=(1, 8), statements: int = 3) -> dict:
    taken = []
    original = minimize._stacked_update
    monkeypatch.setattr(minimize, "_stacked_update",
                        lambda *args: taken.append(original(*args)) or taken[-1] if stacked else None)
    con = trdb.connect()
    embedding_model(con, np.random.default_rng(3), tile=tile)
    losses = [con.execute(f"MINIMIZE loss WRT (E, w) WITH ({options}, steps = 2)").fetchall()
              for _ in range(statements)]
    out = {"losses": losses, "E": con.execute("SELECT * FROM E").fetch_tensor((40, 8)),
           "w": con.execute("SELECT * FROM w").fetch_tensor((1, 8))}
    if "adam" in options:
        for name in ("__trdb_adam_m__e", "__trdb_adam_v__e"):
            out[name] = con.execute(f"SELECT * FROM {name}").fetch_tensor((40, 8))
    out["stacked"] = sum(t is not None for t in taken)
    con.close()
    monkeypatch.undo()
    return out


@pytest.mark.parametrize("options", ["optimizer = 'adam', learning_rate = 0.05", "optimizer = 'sgd'"])
@pytest.mark.parametrize("tile", [(1, 8), (3, 8)], ids=["one-row-tiles", "edge-tiles"])
def test_stacked_steps_equal_tile_by_tile_steps(monkeypatch, options, tile):
    fast = trained(monkeypatch, True, options, tile)
    slow = trained(monkeypatch, False, options, tile)
    # 3 statements of 2 steps, 2 parameters: one-row tiles stack, edge tiles go tile by tile (w, one tile, stacks)
    assert (fast.pop("stacked"), slow.pop("stacked")) == ((12, 0) if tile[0] == 1 else (6, 0))
    assert fast.keys() == slow.keys()
    for name in fast:  # up to the last bits: parallel plans add a group's tuples in the order workers hand them on
        np.testing.assert_allclose(np.asarray(fast[name], dtype=float), np.asarray(slow[name], dtype=float),
                                   rtol=1e-12, atol=1e-15, err_msg=name)
    assert fast["losses"][-1][-1][1] < fast["losses"][0][0][1]  # it trains


def test_untouched_embeddings_move_under_adam_and_stay_under_sgd(monkeypatch):
    con = trdb.connect()
    embedding_model(con, np.random.default_rng(3))
    before = con.execute("SELECT * FROM E").fetch_tensor((40, 8))
    con.execute("MINIMIZE loss WRT (E) WITH (optimizer = 'sgd', steps = 1)")
    after_sgd = con.execute("SELECT * FROM E").fetch_tensor((40, 8))
    assert np.array_equal(after_sgd[30:], before[30:])  # a zero gradient: SGD leaves them
    assert not np.array_equal(after_sgd[:30], before[:30])
    con.close()


def test_a_float32_parameter_steps_in_float32_under_sgd(monkeypatch):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((64, 4)).astype(np.float32)
    con = trdb.connect()
    con.execute("CREATE TENSOR X FROM ? TILE (1, 4)", [X])
    con.execute("CREATE TENSOR Y FROM ? TILE (1, 4)", [np.zeros((64, 4), np.float32)])
    con.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(X.v - Y.v)) AS v FROM X JOIN Y ON X.i = Y.i")
    con.execute("MINIMIZE loss WRT (X) WITH (optimizer = 'sgd', learning_rate = 0.25, steps = 1)")
    stepped = con.execute("SELECT * FROM X").fetch_tensor((64, 4))
    expected = X.copy()
    expected -= np.float32(0.25) * (2 * X)  # numpy's W -= rate * g in float32
    assert stepped.dtype == np.float32
    assert np.array_equal(stepped, expected)
    con.close()


def test_one_tile_parameters_written_over_in_place_read_back_from_the_file(tmp_path, monkeypatch):
    """A parameter of one tile and its moments are written over in place (storage/tile_store.py
    planned_overwrite): a new connection to the file reads the values the step made, and Adam goes on from its
    stored moments as if the connection had stayed open."""
    from trdb.storage import tile_store
    overwritten = []
    original = tile_store.planned_overwrite

    def spied(*args):
        found = original(*args)
        overwritten.append(found is not None)
        return found
    monkeypatch.setattr(tile_store, "planned_overwrite", spied)

    def model(con):
        con.execute("CREATE TENSOR X FROM ? TILE (16, 4) DTYPE float64",
                    [np.random.default_rng(1).standard_normal((16, 4))])
        con.execute("CREATE TENSOR W SHAPE (4, 2) TILE (4, 2) DTYPE float64 FILL RANDOM_NORMAL(0, 1, 5)")
        con.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(MATMUL(X.v, W.v) - 1)) AS v FROM X JOIN W ON X.j = W.i")
    step = "MINIMIZE loss WRT (W) WITH (optimizer = 'adam', learning_rate = 0.1, steps = 3)"
    path = str(tmp_path / "w.trdb")
    con = trdb.connect(path)
    model(con)
    con.execute(step)
    con.close()
    con = trdb.connect(path)
    reopened = con.execute(step).fetchall()
    stepped = con.execute("SELECT * FROM W").fetch_tensor()
    con.close()
    memory = trdb.connect()
    model(memory)
    memory.execute(step)
    assert memory.execute(step).fetchall() == reopened
    np.testing.assert_array_equal(memory.execute("SELECT * FROM W").fetch_tensor(), stepped)
    assert overwritten and all(overwritten)  # every write after the first step's moments went in place


def _large_tile_weights(monkeypatch, stacked: bool, tile_rows: int) -> dict:
    """A weight in tiles larger than a column batch takes (48 x 64 float64: 24 KB), one tile or two."""
    taken = []
    original = minimize._stacked_update
    monkeypatch.setattr(minimize, "_stacked_update",
                        lambda *args: taken.append(original(*args)) or taken[-1] if stacked else None)
    rng = np.random.default_rng(8)
    con = trdb.connect()
    con.execute(f"CREATE TENSOR X FROM ? TILE (50, {tile_rows}) DTYPE float64", [rng.standard_normal((50, 96))])
    con.execute("CREATE TENSOR Y FROM ? TILE (50, 64) DTYPE float64", [rng.standard_normal((50, 64))])
    con.execute(f"CREATE TENSOR W FROM ? TILE ({tile_rows}, 64) DTYPE float64", [rng.standard_normal((96, 64)) * 0.1])
    con.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(z.v - Y.v)) AS v FROM (SELECT X.i, W.j, SUM(MATMUL(X.v, W.v)) "
                "AS v FROM X JOIN W ON X.j = W.i GROUP BY X.i, W.j) AS z JOIN Y ON z.i = Y.i AND z.j = Y.j")
    losses = [con.execute("MINIMIZE loss WRT (W) WITH (optimizer = 'adam', learning_rate = 0.01, steps = 2)")
              .fetchall() for _ in range(2)]
    out = {"losses": losses, "W": con.execute("SELECT * FROM W").fetch_tensor(),
           "m": con.execute("SELECT * FROM __trdb_adam_m__W").fetch_tensor(), "stacked": sum(t is not None for t in taken)}
    con.close()
    monkeypatch.undo()
    return out


@pytest.mark.parametrize("tile_rows", [96, 48], ids=["one-tile", "two-tiles"])
def test_large_tiles_step_as_a_stack_with_the_tile_by_tile_values(monkeypatch, tile_rows):
    fast = _large_tile_weights(monkeypatch, True, tile_rows)
    slow = _large_tile_weights(monkeypatch, False, tile_rows)
    assert (fast.pop("stacked"), slow.pop("stacked")) == (4, 0)
    for name in fast:
        np.testing.assert_allclose(np.asarray(fast[name], dtype=float), np.asarray(slow[name], dtype=float),
                                   rtol=1e-12, atol=1e-15, err_msg=name)


def test_a_read_in_several_runs_is_one_stack_in_key_order():
    first, second = np.arange(6.0).reshape(3, 2), np.arange(6.0, 10.0).reshape(2, 2)
    keys = np.array([[4], [0], [3], [1], [2]])
    tiles = TileRuns(tile_views(first) + tile_views(second), ((0, first), (3, second)))
    stack = stored_stack(keys, tiles)
    np.testing.assert_array_equal(stack.keys, [[0], [1], [2], [3], [4]])
    np.testing.assert_array_equal(stack.tiles, np.concatenate([first, second])[[1, 3, 4, 2, 0]])
    loose = TileRuns(tile_views(first) + [np.zeros(2)] + tile_views(second), ((0, first), (4, second)))
    assert stored_stack(np.arange(6).reshape(6, 1), loose) is None  # a tile in no run
    edge = TileRuns(tile_views(first) + tile_views(second[:, :1]), ((0, first), (3, second[:, :1])))
    assert stored_stack(keys, edge) is None  # runs of two tile shapes


def test_a_parameter_of_many_one_value_tiles_steps_as_a_stack(monkeypatch):
    """A read of 300,000 tiles comes in several runs (one per batch DuckDB hands over): still one stack, and
    Adam's steps of it numpy's."""
    taken = []
    original = minimize._stacked_update
    monkeypatch.setattr(minimize, "_stacked_update", lambda *args: taken.append(original(*args)) or taken[-1])
    start = np.random.default_rng(5).standard_normal(300_000).astype(np.float32)
    con = trdb.connect()
    con.execute("CREATE TENSOR f FROM ? TILE (1)", [start])
    con.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(f.v)) AS v FROM f")
    for _ in range(2):
        con.execute("MINIMIZE loss WRT (f) WITH (optimizer = 'adam', learning_rate = 0.1, steps = 1)")
    x, m, v = start.astype(np.float64), 0.0, 0.0
    for step in (1, 2):  # torch.optim.Adam's defaults, in numpy
        gradient = 2 * x
        m, v = 0.9 * m + 0.1 * gradient, 0.999 * v + 0.001 * gradient ** 2
        x = x - 0.1 * (m / (1 - 0.9 ** step)) / (np.sqrt(v / (1 - 0.999 ** step)) + 1e-8)
    np.testing.assert_allclose(con.execute("SELECT * FROM f").fetch_tensor(), x, rtol=1e-5, atol=1e-6)
    assert [t is not None for t in taken] == [True, True]
