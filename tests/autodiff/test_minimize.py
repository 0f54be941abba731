"""MINIMIZE: training converges, parameters persist, an interrupted run keeps its completed steps."""
from __future__ import annotations

import _thread
import threading

import numpy as np
import pytest

import trdb
from helpers.mlp_views import create_mlp_views

N = 20000


def separable_set(cur):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((N, 8)).astype(np.float32)
    true_w = rng.standard_normal((8, 1)).astype(np.float32)
    y = (X @ true_w > 0).astype(np.float32)
    cur.execute("CREATE TENSOR X FROM ? TILE (2000, 8)", [X])
    cur.execute("CREATE TENSOR Y FROM ? TILE (2000, 1)", [y])
    cur.execute("CREATE TENSOR w SHAPE (8, 1) TILE (8, 1) FILL RANDOM_NORMAL(0, 0.01, 1)")
    cur.execute("CREATE VIEW logits AS SELECT X.i, w.j, SUM(MATMUL(X.v, w.v)) AS v FROM X JOIN w ON X.j = w.i "
                "GROUP BY X.i, w.j")
    cur.execute(f"CREATE VIEW loss AS SELECT SUM(REDUCE_SUM(BCE_WITH_LOGITS(z.v, Y.v))) / {N} AS v "
                "FROM logits AS z JOIN Y ON z.i = Y.i AND z.j = Y.j")
    return X, y


def accuracy(cur, X, y) -> float:
    W = cur.execute("SELECT * FROM w").fetch_tensor()
    return float(((X @ W > 0) == (y > 0.5)).mean())


@pytest.mark.parametrize("optimizer,rate,steps", [("adam", 0.1, 40), ("sgd", 2.0, 40)])
def test_logistic_regression_reaches_98_percent(cur, optimizer, rate, steps):
    X, y = separable_set(cur)
    rows = cur.execute(f"MINIMIZE loss WRT (w) WITH (optimizer = '{optimizer}', learning_rate = {rate}, "
                       f"steps = {steps})").fetchall()
    assert [r[0] for r in rows] == list(range(1, steps + 1))
    losses = [r[1] for r in rows]
    assert losses[-1] < losses[0] * 0.5 and losses[-1] == min(losses[-5:]) or losses[-1] < losses[-5]
    assert accuracy(cur, X, y) >= 0.98


def test_parameters_persist_in_a_file_database(tmp_path):
    path = str(tmp_path / "model.trdb")
    with trdb.connect(path) as con:
        cur = con.cursor()
        X, y = separable_set(cur)
        cur.execute("MINIMIZE loss WRT (w) WITH (optimizer = 'adam', learning_rate = 0.1, steps = 30)")
        trained = cur.execute("SELECT * FROM w").fetch_tensor()
    with trdb.connect(path) as con:
        cur = con.cursor()
        np.testing.assert_array_equal(cur.execute("SELECT * FROM w").fetch_tensor(), trained)
        assert cur.execute("SELECT step FROM _trdb.adam_steps").fetchall() == [(30,)]
        assert accuracy(cur, X, y) >= 0.98


def test_ctrl_c_keeps_the_last_completed_step(cur):
    separable_set(cur)
    before = cur.execute("SELECT * FROM w").fetch_tensor()
    timer = threading.Timer(1.0, _thread.interrupt_main)
    timer.start()
    # Ctrl-C stops it: trdb's handler cancels the step, which rolls back, and KeyboardInterrupt follows
    # (once, about 1 run in 15, DuckDB took the interrupt itself and left the step's transaction aborted)
    try:
        with pytest.raises(KeyboardInterrupt):
            cur.execute("MINIMIZE loss WRT (w) WITH (optimizer = 'adam', learning_rate = 0.1, steps = 100000)")
    finally:
        timer.cancel()  # a statement that failed otherwise leaves no Ctrl-C to land in the next test
    (step,), = cur.execute("SELECT step FROM _trdb.adam_steps").fetchall()
    assert step >= 1  # completed steps were committed one by one
    after = cur.execute("SELECT * FROM w").fetch_tensor()
    assert not np.array_equal(before, after)
    # the moments and the parameters agree on how many steps were taken: nothing half-written
    assert cur.execute("SELECT COUNT(*) FROM __trdb_adam_m__w").fetchone() == (1,)


def test_bad_options_are_rejected(cur):
    separable_set(cur)
    with pytest.raises(trdb.ProgrammingError, match='unknown option "lr"'):
        cur.execute("MINIMIZE loss WRT (w) WITH (lr = 0.1)")
    with pytest.raises(trdb.ProgrammingError, match="optimizer must be"):
        cur.execute("MINIMIZE loss WRT (w) WITH (optimizer = 'lbfgs')")
    with pytest.raises(trdb.ProgrammingError, match='"nothing" does not exist'):
        cur.execute("MINIMIZE loss WRT (nothing)")


def test_update_from_grad_is_one_gradient_step(cur):
    separable_set(cur)
    W = cur.execute("SELECT * FROM w").fetch_tensor()
    G = cur.execute("SELECT * FROM GRAD(loss, w)").fetch_tensor()
    cur.execute("UPDATE w SET v = w.v - 0.5 * G.v FROM GRAD(loss, w) AS G WHERE w.i = G.i AND w.j = G.j")
    np.testing.assert_allclose(cur.execute("SELECT * FROM w").fetch_tensor(), W - 0.5 * G, rtol=1e-6)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_step_keeps_the_tiles_it_wrote_as_a_read_gives_them(tmp_path, optimizer):
    path = str(tmp_path / "kept.trdb")
    with trdb.connect(path) as con:
        cur = con.cursor()
        separable_set(cur)
        cur.execute(f"MINIMIZE loss WRT (w) WITH (optimizer = '{optimizer}', learning_rate = 0.1, steps = 2)")
        pool = con._session().catalog.pool
        misses = pool.misses
        kept = cur.execute("SELECT * FROM w").fetch_tensor()
        assert pool.misses == misses  # the step's tiles, not read back
        pool.shrink(pool.bytes)
        np.testing.assert_array_equal(cur.execute("SELECT * FROM w").fetch_tensor(), kept)  # read from DuckDB
        cur.execute("BEGIN")
        cur.execute(f"MINIMIZE loss WRT (w) WITH (optimizer = '{optimizer}', learning_rate = 0.1, steps = 1)")
        assert not np.array_equal(cur.execute("SELECT * FROM w").fetch_tensor(), kept)
        cur.execute("ROLLBACK")
        np.testing.assert_array_equal(cur.execute("SELECT * FROM w").fetch_tensor(), kept)
    with trdb.connect(path) as con:
        np.testing.assert_array_equal(con.cursor().execute("SELECT * FROM w").fetch_tensor(), kept)


def test_a_step_of_two_parameters_gives_each_a_new_version_another_connection_sees(tmp_path):
    """A step saves its parameters' statistics in one catalog UPDATE: each gets a new data version, the step's
    (a version names tiles together with their tile table, so tensors may share it; a connection holding the
    old tiles reads the new ones), with the counts a recount gives."""
    path = str(tmp_path / "two.trdb")
    with trdb.connect(path) as con, trdb.connect(path) as other:
        cur, watcher = con.cursor(), other.cursor()
        separable_set(cur)
        cur.execute("CREATE TENSOR b SHAPE (8, 1) TILE (8, 1) FILL CONSTANT(0.5)")
        cur.execute("CREATE OR REPLACE VIEW logits AS SELECT X.i, w.j, SUM(MATMUL(X.v, w.v + b.v)) AS v "
                    "FROM X JOIN w ON X.j = w.i JOIN b ON w.i = b.i AND w.j = b.j GROUP BY X.i, w.j")
        before = {name: watcher.execute(f"SELECT * FROM {name}").fetch_tensor() for name in ("w", "b")}
        versions = dict(cur.execute("SELECT name, data_version FROM _trdb.tensors").fetchall())
        grads = {name: cur.execute(f"SELECT * FROM GRAD(loss, {name})").fetch_tensor() for name in ("w", "b")}
        cur.execute("MINIMIZE loss WRT (w, b) WITH (optimizer = 'sgd', learning_rate = 0.5, steps = 1)")
        after = dict(cur.execute("SELECT name, data_version FROM _trdb.tensors").fetchall())
        assert after["w"] > versions["w"] and after["b"] > versions["b"]
        tables = cur.execute("SELECT COUNT(DISTINCT tile_table) FROM _trdb.tensors WHERE name IN ('w', 'b')")
        assert tables.fetchone()[0] == 2  # (tile table, version) names each tensor's tiles apart
        for name in ("w", "b"):
            np.testing.assert_allclose(watcher.execute(f"SELECT * FROM {name}").fetch_tensor(),
                                       before[name] - 0.5 * grads[name], rtol=1e-5, atol=1e-7)
        stored = cur.execute("SELECT name, tuple_count, nnz FROM _trdb.tensors WHERE name IN ('w', 'b') "
                             "ORDER BY name").fetchall()
        assert stored == [("b", 1, 8), ("w", 1, 8)]


def test_a_step_that_changes_its_parameters_statistics_saves_them_and_one_that_does_not_keeps_them(cur):
    """SGD at rate 0.5 on SQUARE(v) * m: where m is 1 the step zeroes the tile exactly, where it is 0.5 it
    halves it. The first step stores a and b with their tile 0 all zeros (kept: zeros are values), so their
    non-zero counts change and are saved; the next changes no count and saves only new data versions. Each time
    the counts are those of the tiles stored, and reads give the values the step wrote."""
    cur.execute("CREATE TENSOR a SHAPE (8, 1) TILE (4, 1) FILL CONSTANT(1.0)")
    cur.execute("CREATE TENSOR b SHAPE (8, 1) TILE (4, 1) FILL CONSTANT(2.0)")
    cur.execute("CREATE TENSOR m FROM ? TILE (4, 1)", [np.array([[1.0]] * 4 + [[0.5]] * 4)])
    cur.execute("CREATE VIEW loss AS SELECT SUM(REDUCE_SUM(SQUARE(a.v) * m.v + SQUARE(b.v) * m.v)) AS v "
                "FROM a JOIN b ON a.i = b.i AND a.j = b.j JOIN m ON a.i = m.i AND a.j = m.j")
    catalog = "SELECT name, tuple_count, nnz, data_version FROM _trdb.tensors WHERE name IN ('a', 'b') ORDER BY name"
    versions = [row[3] for row in cur.execute(catalog).fetchall()]
    for step in range(1, 3):
        cur.execute("MINIMIZE loss WRT (a, b) WITH (optimizer = 'sgd', learning_rate = 0.5, steps = 1)")
        rows = cur.execute(catalog).fetchall()
        assert [row[:3] for row in rows] == [("a", 2, 4), ("b", 2, 4)]
        assert all(row[3] > old for row, old in zip(rows, versions))
        versions = [row[3] for row in rows]
        for name, start in (("a", 1.0), ("b", 2.0)):
            tiles = [row[-1] for row in cur.execute(f"SELECT * FROM {name}").fetchall()]
            assert (len(tiles), sum(np.count_nonzero(tile) for tile in tiles)) == (2, 4)
            np.testing.assert_array_equal(cur.execute(f"SELECT * FROM {name}").fetch_tensor(shape=(8, 1)),
                                          [[0]] * 4 + [[start * 0.5 ** step]] * 4)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_adam_steps_a_parameter_in_its_own_precision(cur, dtype):
    """Adam's arithmetic runs in the parameter's float type (as torch.optim.Adam's), its moments stored in it
    too: two steps of SUM(SUMSQ(W)) (gradient 2W, exact) equal numpy's in that type, bit for bit."""
    W = np.random.default_rng(8).standard_normal((6, 5)).astype(dtype)
    cur.execute(f"CREATE TENSOR W FROM ? TILE (3, 5) DTYPE {dtype}", [W])
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(W.v)) AS v FROM W")
    cur.execute("MINIMIZE loss WRT (W) WITH (optimizer = 'adam', learning_rate = 0.1, steps = 2)")
    expected, m, v = W.copy(), np.zeros_like(W), np.zeros_like(W)
    for step in (1, 2):
        g = 2 * expected
        m = np.multiply(g, 1 - 0.9) + 0.9 * m
        v = np.multiply(g, 1 - 0.999) * g + 0.999 * v
        direction = np.divide(m, 1 - 0.9 ** step) / (np.sqrt(np.divide(v, 1 - 0.999 ** step)) + 1e-8)
        expected = np.multiply(direction, -0.1) + expected
    got = cur.execute("SELECT * FROM W").fetch_tensor()
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, expected)


def test_the_loss_is_summed_where_the_gradients_are_computed(cur):
    """A loss of one scalar tuple over a join (TransE): MINIMIZE sums it from terms that the gradients' shared
    projection computes beside the derivatives, so a step runs the join once (three joins in its EXPLAIN, not
    six), and each step reports the loss a SELECT of the view gives before it."""
    rng = np.random.default_rng(5)
    cur.execute("CREATE TENSOR E FROM ? TILE (1, 4) DTYPE float64", [rng.standard_normal((12, 4))])
    cur.execute("CREATE TENSOR R FROM ? TILE (1, 4) DTYPE float64", [rng.standard_normal((3, 4))])
    cur.execute("CREATE TABLE triples (h BIGINT, r BIGINT, t BIGINT)")
    cur.executemany("INSERT INTO triples VALUES (?, ?, ?)",
                    [tuple(int(x) for x in row) for row in rng.integers(0, [12, 3, 12], (30, 3))])
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(H.v + Q.v - U.v)) / 30 AS v FROM triples AS X "
                "JOIN E AS H ON H.i = X.h JOIN R AS Q ON Q.i = X.r JOIN E AS U ON U.i = X.t")
    step = "MINIMIZE loss WRT (E, R) WITH (optimizer = 'sgd', learning_rate = 0.1, steps = 1)"
    assert "\n".join(row[0] for row in cur.execute("EXPLAIN " + step)).count("HashJoinExec") == 3
    for _ in range(3):
        before = float(cur.execute("SELECT * FROM loss").fetchone()[0])
        reported = cur.execute(step).fetchall()[0][1]
        assert reported == pytest.approx(before, rel=1e-12)


def test_a_loss_whose_gradient_reads_its_value_is_computed_as_it_is(cur):
    """SQRT of a sum: its derivative reads the loss, so the gradients compute no terms of it, and the loss is
    computed as written (not from terms of the forward pass with lineage, which would then be kept whole)."""
    rng = np.random.default_rng(6)
    cur.execute("CREATE TENSOR X FROM ? TILE (4, 3)", [rng.standard_normal((8, 3))])
    cur.execute("CREATE TENSOR W FROM ? TILE (3, 2)", [rng.standard_normal((3, 2))])
    cur.execute("CREATE VIEW l AS SELECT SQRT(SUM(SUMSQ(MATMUL(X.v, W.v)))) AS v FROM X JOIN W ON X.j = W.i")
    step = "MINIMIZE l WRT (W) WITH (optimizer = 'sgd', learning_rate = 0.01, steps = 1)"
    assert "_term" not in "\n".join(row[0] for row in cur.execute("EXPLAIN " + step))
    before = float(cur.execute("SELECT * FROM l").fetchone()[0])
    assert cur.execute(step).fetchall()[0][1] == pytest.approx(before, rel=1e-12)


def test_a_loss_above_shared_layers_is_summed_where_the_gradients_are(cur):
    """An MLP's loss: below its terms the hidden layer's projection is itself shared with the gradients (read from
    a larger one), and the loss still reads its terms from the gradients' projection."""
    rng = np.random.default_rng(3)
    for name, shape, tile in [("X", (12, 4), (6, 4)), ("W1", (4, 6), (4, 3)), ("W2", (6, 2), (3, 2)),
                              ("Y", (12, 2), (6, 2))]:
        cur.execute(f"CREATE TENSOR {name} FROM ? TILE {tile}", [rng.standard_normal(shape)])
    create_mlp_views(cur)
    step = "MINIMIZE loss WRT (W1, W2) WITH (optimizer = 'sgd', learning_rate = 0.01, steps = 1)"
    assert "SUM(_term0)" in "\n".join(row[0] for row in cur.execute("EXPLAIN " + step))
    before = float(cur.execute("SELECT * FROM loss").fetchone()[0])
    assert cur.execute(step).fetchall()[0][1] == pytest.approx(before, rel=1e-12)
