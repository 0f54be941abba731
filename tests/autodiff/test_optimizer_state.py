"""Adam's stored state (moment tensors, step count) goes with its parameter and never outlives its shape."""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from trdb.storage.tensor_meta import TensorMeta


def adam_reference(W: np.ndarray, steps: int, rate: float, beta1=0.9, beta2=0.999, eps=1e-8) -> np.ndarray:
    """Adam from fresh moments on loss = sum(W ** 2), as numpy."""
    W, m, v = W.astype(np.float64), np.zeros_like(W, np.float64), np.zeros_like(W, np.float64)
    for t in range(1, steps + 1):
        g = 2 * W
        m, v = beta1 * m + (1 - beta1) * g, beta2 * v + (1 - beta2) * g * g
        W = W - rate * (m / (1 - beta1 ** t)) / (np.sqrt(v / (1 - beta2 ** t)) + eps)
    return W


def make_param(cur, shape: tuple[int, int], seed: int) -> np.ndarray:
    W = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    cur.execute(f"CREATE TENSOR W FROM ? TILE ({shape[0]}, {shape[1]})", [W])
    cur.execute("CREATE OR REPLACE VIEW loss AS SELECT SUM(SUMSQ(W.v)) AS v FROM W")
    return W


def adam(cur, steps: int) -> None:
    cur.execute(f"MINIMIZE loss WRT (W) WITH (optimizer = 'adam', learning_rate = 0.05, steps = {steps})")


def tensor_names(cur) -> set[str]:
    """The tensors, and the optimizer state that DESCRIBE of each lists (SHOW TENSORS leaves state out)."""
    names = {row[0] for row in cur.execute("SHOW TENSORS").fetchall()}
    state = {row[0] for name in names for row in cur.execute(f"DESCRIBE {name}").fetchall()
             if row[2] == "optimizer state"}
    return names | state


def adam_steps(cur) -> list[tuple]:
    return cur.execute("SELECT param, step FROM _trdb.adam_steps ORDER BY param").fetchall()


def assert_trained_from_fresh_state(cur, W: np.ndarray, steps: int) -> None:
    np.testing.assert_allclose(cur.execute("SELECT * FROM W").fetch_tensor(), adam_reference(W, steps, 0.05),
                               rtol=1e-5, atol=1e-6)
    assert adam_steps(cur) == [("W", steps)]
    assert cur.execute("SELECT * FROM __trdb_adam_m__W").fetch_tensor().shape == W.shape


def test_drop_tensor_drops_its_adam_state(cur):
    make_param(cur, (4, 2), seed=1)
    adam(cur, 3)
    assert {"__trdb_adam_m__W", "__trdb_adam_v__W"} <= tensor_names(cur) and adam_steps(cur) == [("W", 3)]
    cur.execute("DROP TENSOR w")  # names are case-insensitive
    assert not {"__trdb_adam_m__W", "__trdb_adam_v__W"} & tensor_names(cur)
    assert adam_steps(cur) == []


def test_recreated_parameter_of_another_shape_trains_from_fresh_state(cur):
    make_param(cur, (4, 2), seed=1)
    adam(cur, 3)
    cur.execute("DROP TENSOR W")
    W = make_param(cur, (6, 3), seed=2)
    adam(cur, 2)  # was: InternalError: operands could not be broadcast
    assert_trained_from_fresh_state(cur, W, 2)


def test_drop_and_its_state_roll_back_together(cur):
    make_param(cur, (4, 2), seed=1)
    adam(cur, 3)
    cur.execute("BEGIN")
    cur.execute("DROP TENSOR W")
    cur.execute("ROLLBACK")
    assert {"W", "__trdb_adam_m__W", "__trdb_adam_v__W"} <= tensor_names(cur) and adam_steps(cur) == [("W", 3)]


def make_state(cur, name: str, shape: tuple, tile: tuple, dtype: str = "float32") -> None:
    """A moment tensor as an older database may have left it (users cannot create one: trdb's namespace)."""
    session = cur.connection._live
    with session.lock, session.db.statement():
        session.catalog.create_tensor(TensorMeta(name, ("i", "j"), "v", np.dtype(dtype), shape, tile, ""), internal=True)


@pytest.mark.parametrize("drop,made", [
    ("__trdb_adam_m__W", ((3, 3), (3, 3))),                   # moments of an old shape
    ("__trdb_adam_v__W", ((4, 2), (2, 2))),                   # or tiling
    ("__trdb_adam_v__W", ((4, 2), (4, 2), "float64")),
    ("__trdb_adam_v__W", None),                               # half the state
    ("__trdb_adam_m__W; __trdb_adam_v__W", None),             # a step count alone
])
def test_state_that_does_not_fit_starts_fresh(cur, drop, made):
    make_param(cur, (4, 2), seed=1)
    adam(cur, 3)
    W = cur.execute("SELECT * FROM W").fetch_tensor()
    for name in drop.split("; "):
        cur.execute(f"DROP TENSOR {name}")
    if made is not None:
        make_state(cur, drop, *made)
    adam(cur, 2)
    assert_trained_from_fresh_state(cur, W, 2)


def test_state_that_fits_is_kept(cur):
    W = make_param(cur, (4, 2), seed=1)
    adam(cur, 2)
    adam(cur, 3)  # continues: same as five steps in one run
    assert_trained_from_fresh_state(cur, W, 5)


@pytest.mark.parametrize("options,message", [
    ("learning_rate = 'abc'", "learning_rate must be a finite number"),
    ("beta1 = 'x'", "beta1 must be a finite number"),
    ("learning_rate = 1e400", "learning_rate must be a finite number"),
    ("steps = true", "steps must be a positive integer"),
    ("beta1 = 1", "beta1 must be at least 0 and below 1"),
    ("beta2 = -0.5", "beta2 must be at least 0 and below 1"),
    ("epsilon = 0", "epsilon must be positive"),
])
def test_bad_options_are_programming_errors(cur, options, message):
    make_param(cur, (4, 2), seed=1)
    with pytest.raises(trdb.ProgrammingError, match=message):
        cur.execute(f"MINIMIZE loss WRT (W) WITH (optimizer = 'adam', {options})")


def test_adam_over_many_tiles_of_several_shapes_is_exactly_adam_tile_by_tile(cur):
    # the moments and steps of tiles of one shape are computed stacked: the same float operations as one by one
    W = np.random.default_rng(4).standard_normal((37, 10)).astype(np.float32)
    cur.execute("CREATE TENSOR W FROM ? TILE (4, 3)", [W])  # full tiles and three shapes of edge tiles
    cur.execute("CREATE OR REPLACE VIEW loss AS SELECT SUM(SUMSQ(W.v)) AS v FROM W")
    beta1, beta2, eps, rate = 0.9, 0.999, 1e-8, 0.05
    w, m, v = W, np.zeros_like(W), np.zeros_like(W)
    for t in range(1, 4):  # in float32, the parameter's type (as torch.optim.Adam)
        g = 2 * w
        m, v = beta1 * m + (1 - beta1) * g, beta2 * v + (1 - beta2) * g * g
        step = (m / (1 - beta1 ** t)) / (np.sqrt(v / (1 - beta2 ** t)) + eps)
        w = np.multiply(step, -rate) + w
        assert w.dtype == m.dtype == v.dtype == np.float32
    cur.execute(f"MINIMIZE loss WRT (W) WITH (optimizer = 'adam', learning_rate = {rate}, steps = 3)")
    np.testing.assert_array_equal(cur.execute("SELECT * FROM W").fetch_tensor(), w)
    np.testing.assert_array_equal(cur.execute("SELECT * FROM __trdb_adam_m__W").fetch_tensor(), m)
    np.testing.assert_array_equal(cur.execute("SELECT * FROM __trdb_adam_v__W").fetch_tensor(), v)


@pytest.mark.parametrize("name", ["x__adam_m", "x__adam_v", "W__adam_m"])
def test_a_users_tensor_named_like_old_state_is_a_users_tensor(cur, name):
    """Was: `x__adam_m` was taken for x's optimizer state: hidden from SHOW, overwritten by MINIMIZE, dropped with x."""
    make_param(cur, (4, 2), seed=1)
    cur.execute("CREATE TENSOR x SHAPE (4, 2) TILE (2, 2) FILL ONES")
    mine = np.arange(8, dtype=np.float32).reshape(4, 2)
    cur.execute(f"CREATE TENSOR {name} FROM ? TILE (4, 2)", [mine])
    assert name in {row[0] for row in cur.execute("SHOW TENSORS").fetchall()}
    adam(cur, 2)
    cur.execute("DROP TENSOR x")
    np.testing.assert_array_equal(cur.execute(f"SELECT * FROM {name}").fetch_tensor(), mine)


@pytest.mark.parametrize("statement", ["CREATE TENSOR __trdb_adam_m__W SHAPE (4, 2) TILE (2, 2) FILL ONES",
                                       "CREATE TENSOR \"__TRDB_x\" SHAPE (2) TILE (2)",
                                       "ALTER TENSOR W RENAME TO __trdb_adam_v__V"])
def test_trdbs_own_namespace_is_refused_to_users(cur, statement):
    make_param(cur, (4, 2), seed=1)
    with pytest.raises(trdb.ProgrammingError, match="reserved for trdb"):
        cur.execute(statement)


@pytest.fixture
def steps_read(monkeypatch):
    """How many times a MINIMIZE read step counts from the database."""
    from trdb.statements import minimize
    reads = []
    original = minimize.read_adam_steps
    monkeypatch.setattr(minimize, "read_adam_steps", lambda db, names: reads.append(names) or original(db, names))
    return reads


def test_a_loop_of_one_step_minimizes_reads_the_step_count_once_and_trains_as_one(cur, steps_read):
    W = make_param(cur, (4, 3), 21)
    for _ in range(5):
        adam(cur, 1)
        cur.execute("SELECT SUM(SUMSQ(W.v)) AS v FROM W").fetchall()  # reading changes nothing
    assert len(steps_read) == 1  # the first statement's: the next ones knew what the last one wrote
    assert_trained_from_fresh_state(cur, W, 5)


def test_a_step_count_rolled_back_or_written_by_another_connection_is_read_again(tmp_path, steps_read):
    path = str(tmp_path / "steps.trdb")
    con = trdb.connect(path)
    cur = con.cursor()
    W = make_param(cur, (4, 3), 22)
    adam(cur, 1)
    cur.execute("BEGIN")
    adam(cur, 1)
    cur.execute("ROLLBACK")  # the count of 2 it wrote is gone
    adam(cur, 1)
    assert len(steps_read) == 2 and adam_steps(cur) == [("W", 2)]
    assert_trained_from_fresh_state(cur, W, 2)
    other = trdb.connect(path)
    other.execute("MINIMIZE loss WRT (W) WITH (optimizer = 'adam', learning_rate = 0.05, steps = 1)")
    adam(cur, 1)  # after the other connection's step 3: step 4
    assert len(steps_read) == 4 and adam_steps(cur) == [("W", 4)]
    assert_trained_from_fresh_state(cur, W, 4)
    other.close()
    con.close()


def test_a_failed_step_leaves_the_count_the_database_holds(cur, steps_read, monkeypatch):
    from trdb.catalog.catalog import Catalog
    W = make_param(cur, (4, 3), 23)
    adam(cur, 2)
    original = Catalog.remember_adam_steps
    monkeypatch.setattr(Catalog, "remember_adam_steps", lambda self, steps: (original(self, steps), 1 / 0))
    with pytest.raises(trdb.InternalError, match="division by zero"):
        adam(cur, 1)  # step 3 counted, remembered, then rolled back
    monkeypatch.setattr(Catalog, "remember_adam_steps", original)
    adam(cur, 1)
    assert adam_steps(cur) == [("W", 3)]
    assert_trained_from_fresh_state(cur, W, 3)


def test_parameters_with_their_own_step_counts_keep_them_in_one_minimize(cur):
    """W trained alone for 3 steps, then W and U together for 2: W's count goes 3 -> 5 and U's 0 -> 2 (one
    UPDATE sets both), and each parameter's values are Adam's from its own count (numpy's sum of squares)."""
    W = make_param(cur, (4, 2), seed=1)
    adam(cur, 3)
    U = np.random.default_rng(2).standard_normal((3, 2)).astype(np.float32)
    cur.execute("CREATE TENSOR U FROM ? TILE (3, 2)", [U])
    cur.execute("CREATE OR REPLACE VIEW both_loss AS SELECT SUM(SUMSQ(W.v)) + SUM(SUMSQ(U.v)) AS v FROM W, U")
    cur.execute("MINIMIZE both_loss WRT (W, U) WITH (optimizer = 'adam', learning_rate = 0.05, steps = 2)")
    assert adam_steps(cur) == [("U", 2), ("W", 5)]
    np.testing.assert_allclose(cur.execute("SELECT * FROM W").fetch_tensor(), adam_reference(W, 5, 0.05),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cur.execute("SELECT * FROM U").fetch_tensor(), adam_reference(U, 2, 0.05),
                               rtol=1e-5, atol=1e-6)
