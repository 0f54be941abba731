"""Values keep the dtype `description` reports, 0-d results assemble, and duplicate keys are refused by fetches."""
import numpy as np
import pytest

import trdb


@pytest.fixture
def con():
    con = trdb.connect(workers=1)
    con.execute("CREATE TENSOR A (i, j) SHAPE (8, 8) TILE (4, 4) FILL ONES")
    con.execute("CREATE TENSOR B (i, j) SHAPE (8, 8) TILE (4, 4) FILL ONES")
    con.execute("CREATE TENSOR H (i, j) SHAPE (8, 8) TILE (4, 4) DTYPE float16 FILL ONES")
    yield con
    con.close()


@pytest.mark.parametrize("expression, value", [("SUM(REDUCE_SUM(A.v))", 64), ("SUM(REDUCE_SUM(A.v)) / 16", 4),
                                               ("AVG(REDUCE_SUM(A.v)) * 2", 32), ("2 * SUM(REDUCE_SUM(A.v)) + 1", 129)])
def test_a_0_d_tensor_column_is_a_numpy_scalar_of_its_dtype(con, expression, value):
    cursor = con.execute(f"SELECT {expression} AS s FROM A")
    assert cursor.description[0][1] == "TENSOR(float32, [])"
    (got,) = cursor.fetchone()
    assert type(got) is np.float32 and got == value


def test_float16_stays_float16(con):
    (got,) = con.execute("SELECT SUM(REDUCE_SUM(H.v)) * 2 AS s FROM H").fetchone()
    assert type(got) is np.float16 and got == 128


def test_fetch_tensor_of_a_0_d_result_is_a_0_d_array(con):
    total = con.execute("SELECT SUM(REDUCE_SUM(A.v)) AS s FROM A").fetch_tensor()
    assert isinstance(total, np.ndarray) and total.shape == () and total.dtype == np.float32 and total == 64


def test_rows_make_numeric_pandas_columns(con):
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame(con.execute("SELECT A.i, A.j, REDUCE_SUM(A.v) AS s FROM A").fetchall())
    assert [str(t) for t in frame.dtypes] == ["int64", "int64", "float32"]


@pytest.mark.parametrize("fetch", ["fetch_tensor", "fetch_sparse"])
def test_a_result_with_duplicate_keys_is_not_one_tensor(con, fetch):
    cursor = con.execute("SELECT A.i, B.j, MATMUL(A.v, B.v) AS v FROM A JOIN B ON A.j = B.i")
    with pytest.raises(trdb.DataError, match=r"2 tuples under key \(0, 0\)") as caught:
        getattr(cursor, fetch)()
    assert "did you forget SUM(...) with GROUP BY?" in str(caught.value)
    assert len(cursor.fetchall()) == 8  # the rows are still there to be read


def test_a_gradient_has_its_parameters_dtype(con):
    con.execute("CREATE TENSOR W (i, j) SHAPE (4, 4) TILE (2, 2) FILL RANDOM_NORMAL(0, 1, 1)")
    con.execute("CREATE TENSOR X (i, j) SHAPE (4, 4) TILE (2, 2) DTYPE float64 FILL RANDOM_NORMAL(0, 1, 2)")
    con.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(W.v - X.v)) AS v FROM W JOIN X ON W.i = X.i AND W.j = X.j")
    cursor = con.execute("SELECT * FROM GRAD(loss, W)")
    assert cursor.description[-1][1] == "TENSOR(float32, [2, 2])"
    assert {row[-1].dtype for row in cursor.fetchall()} == {np.dtype(np.float32)}


def test_a_row_is_converted_value_by_value_as_user_value_converts_each():
    import scipy.sparse

    from trdb.api.row_reader import user_row, user_value
    row = (3, np.float32(2.5), np.array(1.5, np.float32), np.ones((2, 2)), None, "s", 2.0,
           scipy.sparse.csr_matrix(np.eye(2)), np.int64(7), np.zeros(0))
    converted = user_row(row)
    for got, want in zip(converted, (user_value(v) for v in row)):
        assert type(got) is type(want)
        np.testing.assert_array_equal(np.asarray(got, dtype=object if isinstance(got, str) else None),
                                      np.asarray(want, dtype=object if isinstance(want, str) else None))
    assert type(converted[2]) is np.float32  # a 0-d tile: a numpy scalar of its dtype
