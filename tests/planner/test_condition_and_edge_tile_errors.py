"""Errors the binder raises with a caret where the run time failed without one: a tile in a condition (WHERE, ON),
and an aggregate that adds a stored tensor's full tiles to its smaller edge tiles."""
import numpy as np
import pytest

import trdb


@pytest.fixture
def con():
    con = trdb.connect(workers=1)
    con.execute("CREATE TENSOR A SHAPE (8, 7) TILE (4, 4) FILL RANDOM_NORMAL(0, 1, 1)")
    con.execute("CREATE TENSOR B SHAPE (8, 8) TILE (4, 4) FILL ONES")
    yield con
    con.close()


def caret_column(error: Exception) -> int:
    """The column (0-based, in the statement) the caret of an error points at."""
    return str(error).splitlines()[2].index("^") - len("LINE 1: ")


@pytest.mark.parametrize("statement,part", [
    ("SELECT A.i FROM A WHERE A.v > 0", "A.v > 0"),
    ("SELECT A.i FROM A WHERE A.i = 0 AND NOT (A.v <= 1)", "A.v <= 1"),
    ("SELECT A.i FROM A JOIN B ON A.i = B.i AND A.j = B.j AND A.v > 0", "A.v > 0"),
    ("UPDATE A SET v = A.v * 2 WHERE A.v > 0", "A.v > 0"),
])
def test_a_tile_in_a_condition_is_refused_under_it(con, statement, part):
    with pytest.raises(trdb.ProgrammingError) as failure:
        con.execute(statement)
    assert "keeps or drops whole tuples" in str(failure.value) and "4x4 tile of truth values" in str(failure.value)
    assert caret_column(failure.value) == statement.index(part)
    assert "REDUCE_MAX(A.v) > 0" in failure.value.hint


def test_a_one_element_condition_per_tuple_still_filters(con):
    rows = con.execute("SELECT A.i, A.j FROM A WHERE REDUCE_MAX(A.v) > 100").fetchall()
    assert rows == []
    con.execute("CREATE TENSOR s SHAPE (3) TILE (1) FILL CONSTANT(2)")
    assert len(con.execute("SELECT s.i FROM s WHERE s.v > 1").fetchall()) == 3


@pytest.mark.parametrize("statement", [
    "SELECT SUM(A.v) FROM A",
    "SELECT A.i, AVG(A.v * 2) AS v FROM A GROUP BY A.i",
    "SELECT MAX(x.v) FROM A AS x",
])
def test_an_aggregate_over_full_and_edge_tiles_is_refused_at_the_call(con, statement):
    with pytest.raises(trdb.DataError) as failure:  # the run-time error's class: found early, it reads the same
        con.execute(statement)
    assert "tiles of one group have shapes (4, 4) and (4, 3)" in str(failure.value)
    assert "SHAPE (8, 7) in TILE (4, 4) leaves smaller edge tiles" in str(failure.value)
    function = statement.split("(")[0].split()[-1]
    assert caret_column(failure.value) == statement.index(function + "(")
    assert "REDUCE_" in failure.value.hint and "to GROUP BY" in failure.value.hint


def test_what_keeps_the_shapes_apart_runs(con):
    a = con.execute("SELECT * FROM A").fetch_tensor()
    (total,), = con.execute("SELECT SUM(REDUCE_SUM(A.v)) AS v FROM A").fetchall()
    np.testing.assert_allclose(total, a.sum(), rtol=1e-5)
    rows = con.execute("SELECT A.j, SUM(A.v) AS v FROM A GROUP BY A.j ORDER BY A.j").fetchall()
    assert [r[1].shape for r in rows] == [(4, 4), (4, 3)]
    (whole,), = con.execute("SELECT SUM(B.v) AS v FROM B").fetchall()  # no edge tiles: one shape
    np.testing.assert_array_equal(whole, np.full((4, 4), 4, np.float32))


def test_a_tensor_without_its_edge_tiles_is_not_refused(con):
    """Only a tensor with every tile stored surely meets both shapes: a sparse one may lack the edge tiles."""
    con.execute("CREATE TENSOR S SHAPE (8, 7) TILE (4, 4)")
    con.execute("INSERT INTO S VALUES (0, 0, ?), (1, 0, ?)", [np.ones((4, 4), np.float32), np.ones((4, 4), np.float32)])
    (value,), = con.execute("SELECT SUM(S.v) AS v FROM S").fetchall()
    np.testing.assert_array_equal(value, np.full((4, 4), 2, np.float32))


def test_where_the_binder_cannot_be_sure_the_run_time_error_has_the_hint(con):
    with pytest.raises(trdb.DataError) as failure:
        con.execute("SELECT SUM(A.v) FROM A WHERE A.i >= 0")
    assert "tiles of one group have shapes" in str(failure.value)
    assert "SUM(REDUCE_SUM(A.v))" in failure.value.hint
