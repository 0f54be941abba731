"""What numpy, PyTorch, PostgreSQL and DuckDB users write: `a @ b` is MATMUL, and a JOIN without ON is an error."""
from __future__ import annotations

import numpy as np
import pytest

import trdb


@pytest.fixture
def con():
    with trdb.connect() as connection:
        connection.execute("CREATE TENSOR A SHAPE (4, 6) TILE (2, 3) FILL RANDOM_NORMAL(0, 1, 1)")
        connection.execute("CREATE TENSOR B SHAPE (6, 4) TILE (3, 2) FILL RANDOM_NORMAL(0, 1, 2)")
        yield connection


def test_the_at_operator_is_matmul(con):
    a, b = (con.execute(f"SELECT * FROM {n}").fetch_tensor() for n in "AB")
    got = con.execute("SELECT A.i, B.j, SUM(A.v @ B.v) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j").fetch_tensor()
    np.testing.assert_allclose(got, a @ b, rtol=1e-5)
    same = con.execute("SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j")
    np.testing.assert_array_equal(got, same.fetch_tensor())
    assert con.execute("SELECT 2 * 3 + 1 AS x").fetchall() == [(7,)]  # the other products unchanged


@pytest.mark.parametrize("join", ["JOIN", "INNER JOIN", "LEFT JOIN", "FULL OUTER JOIN"])
def test_a_join_without_on_is_an_error_with_a_caret_and_a_hint(con, join):
    with pytest.raises(trdb.ProgrammingError) as failure:
        con.execute(f"SELECT A.i FROM A {join} B")
    message = str(failure.value)
    assert "JOIN needs an ON condition" in message and "^" in message and "CROSS JOIN" in message


def test_cross_join_and_comma_still_pair_every_tuple(con):
    assert con.execute("SELECT COUNT(*) FROM A CROSS JOIN B").fetchone() == (16,)
    assert con.execute("SELECT COUNT(*) FROM A, B").fetchone() == (16,)
