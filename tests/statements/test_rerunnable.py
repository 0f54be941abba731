"""CREATE OR REPLACE / IF NOT EXISTS for every CREATE TENSOR form, ALTER ... RENAME with optimizer state,
status messages, and failures that leave the database as it was."""
from __future__ import annotations

import numpy as np
import pytest

import trdb


@pytest.fixture
def cur():
    con = trdb.connect()
    yield con.cursor()
    con.close()


def tensor(cur, name):
    cur.execute(f"SELECT * FROM {name}")
    return cur.fetch_tensor()


def tensor_names(cur):
    cur.execute("SELECT name FROM _trdb.tensors ORDER BY name")
    return [r[0] for r in cur.fetchall()]


def test_or_replace_and_if_not_exists_for_array_file_and_coo(cur, tmp_path):
    cur.execute("CREATE TENSOR A FROM ? TILE (2, 2)", [np.ones((3, 3))])
    cur.execute("CREATE TENSOR IF NOT EXISTS A FROM ? TILE (2, 2)", [np.zeros((5, 5))])
    assert cur.statusmessage == 'CREATE TENSOR: tensor "A" already exists, skipped'
    np.testing.assert_array_equal(tensor(cur, "A"), np.ones((3, 3)))
    path = tmp_path / "a.npy"
    np.save(path, np.full((2, 5), 4.0))
    cur.execute(f"CREATE OR REPLACE TENSOR A FROM '{path}' TILE (2, 2)")
    np.testing.assert_array_equal(tensor(cur, "A"), np.full((2, 5), 4.0))
    cur.execute("CREATE TABLE entries (r INTEGER, c INTEGER, x DOUBLE)")
    cur.execute("INSERT INTO entries VALUES (0, 1, 2.5), (3, 3, 1.0)")
    cur.execute("CREATE OR REPLACE TENSOR A FROM COO entries (r, c, x) SHAPE (4, 4) TILE (2, 2)")
    assert cur.statusmessage == "CREATE TENSOR A: 2 tiles, 4 x 4 float32"
    expected = np.zeros((4, 4))
    expected[0, 1], expected[3, 3] = 2.5, 1.0
    np.testing.assert_array_equal(tensor(cur, "A"), expected)
    cur.execute("CREATE TENSOR IF NOT EXISTS A FROM COO entries (r, c, x) SHAPE (9, 9) TILE (3, 3)")
    np.testing.assert_array_equal(tensor(cur, "A"), expected)


def test_failed_replace_keeps_the_old_tensor(cur):
    cur.execute("CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL ONES")
    with pytest.raises(trdb.DataError):  # complex arrays are refused after the old A is dropped
        cur.execute("CREATE OR REPLACE TENSOR A FROM ? TILE (2, 2)", [np.ones((2, 2), dtype=complex)])
    with pytest.raises(trdb.DataError):  # FILL value the dtype cannot hold
        cur.execute("CREATE OR REPLACE TENSOR A SHAPE (2, 2) TILE (2, 2) DTYPE int32 FILL CONSTANT(1.5)")
    with pytest.raises(trdb.ProgrammingError):  # the query fails to bind
        cur.execute("CREATE OR REPLACE TENSOR A AS SELECT A.i, A.j, MATMUL(A.v, A.v, A.v) AS v FROM A")
    np.testing.assert_array_equal(tensor(cur, "A"), np.ones((4, 4)))
    assert tensor_names(cur) == ["A"]


def test_replace_inside_a_transaction_rolls_back(cur):
    cur.execute("CREATE TENSOR A SHAPE (2, 2) TILE (2, 2) FILL ONES")
    cur.execute("BEGIN")
    cur.execute("CREATE OR REPLACE TENSOR A SHAPE (3, 3) TILE (3, 3) FILL CONSTANT(2)")
    cur.execute("ALTER TENSOR A RENAME TO B")
    cur.execute("ROLLBACK")
    np.testing.assert_array_equal(tensor(cur, "A"), np.ones((2, 2)))
    assert tensor_names(cur) == ["A"]


def test_rename_moves_the_optimizer_state(cur):
    cur.execute("CREATE TENSOR W SHAPE (2, 2) TILE (2, 2) FILL CONSTANT(1)")
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(W.v)) AS v FROM W")
    cur.execute("MINIMIZE loss WRT (W) WITH (optimizer = 'adam', steps = 3)")
    assert cur.statusmessage == "MINIMIZE loss: 3 steps"
    assert tensor_names(cur) == ["W", "__trdb_adam_m__W", "__trdb_adam_v__W"]
    moment = tensor(cur, "__trdb_adam_m__W")
    cur.execute("ALTER TENSOR w RENAME TO Weights")
    assert cur.statusmessage == "ALTER TENSOR w RENAME TO Weights"
    assert tensor_names(cur) == ["Weights", "__trdb_adam_m__Weights", "__trdb_adam_v__Weights"]
    np.testing.assert_array_equal(tensor(cur, "__trdb_adam_m__Weights"), moment)
    cur.execute("SELECT param, step FROM _trdb.adam_steps")
    assert cur.fetchall() == [("Weights", 3)]
    cur.execute("DROP TENSOR Weights")
    assert tensor_names(cur) == []


def test_status_messages(cur):
    cur.execute("CREATE TENSOR A SHAPE (4096, 4096) TILE (1024, 1024)")
    assert cur.statusmessage == "CREATE TENSOR A: 0 tiles, 4096 x 4096 float32"
    cur.execute("CREATE TENSOR B SHAPE (4, 4) TILE (2, 2) FILL ONES")
    cur.execute("UPDATE B SET v = B.v * 2 WHERE B.i = 0")
    assert cur.statusmessage == "UPDATE B: 2 tiles"
    cur.execute("SELECT * FROM B")
    assert cur.statusmessage is None
    cur.execute("DROP TENSOR A")
    assert cur.statusmessage == "DROP TENSOR A"
    cur.execute("CREATE TABLE t (a INTEGER)")
    assert cur.statusmessage == "CREATE TABLE" and cur.description is None
    cur.execute("CREATE TABLE u AS SELECT * FROM range(3)")  # the count is the rowcount: no result set
    assert cur.statusmessage == "CREATE TABLE: 3 rows" and cur.rowcount == 3 and cur.description is None
    cur.execute("SELECT count(*) AS Count FROM u")
    assert cur.statusmessage is None
    cur.execute("SET workers = 1")
    assert cur.statusmessage == "SET"


def test_failed_rename_leaves_the_tensor_and_its_state(cur):
    cur.execute("CREATE TENSOR W SHAPE (2, 2) TILE (2, 2) FILL CONSTANT(1)")
    cur.execute("CREATE TENSOR V SHAPE (2, 2) TILE (2, 2) FILL CONSTANT(2)")
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(W.v)) AS v FROM W")
    cur.execute("MINIMIZE loss WRT (W) WITH (optimizer = 'adam', steps = 1)")
    with pytest.raises(trdb.IntegrityError, match='"V" already exists'):
        cur.execute("ALTER TENSOR W RENAME TO V")
    with pytest.raises(trdb.ProgrammingError, match='"loss" is a view, not a tensor'):
        cur.execute("ALTER TENSOR loss RENAME TO l2")
    assert tensor_names(cur) == ["V", "W", "__trdb_adam_m__W", "__trdb_adam_v__W"]
    cur.execute("SELECT param, step FROM _trdb.adam_steps")
    assert cur.fetchall() == [("W", 1)]
    np.testing.assert_array_equal(tensor(cur, "V"), np.full((2, 2), 2.0))
