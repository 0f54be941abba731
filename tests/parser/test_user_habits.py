"""What numpy, PyTorch, PostgreSQL and DuckDB users write: `a @ b` is MATMUL (numpy's precedence), a JOIN without ON
is an error, a TILE past its SHAPE is an error under the size, and FROM COO takes a query."""
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


def test_the_at_operator_has_numpys_precedence():
    """`a @ b * c` is `(a @ b) * c` and `a + b @ c` is `a + (b @ c)`: @ binds as * does, left to right."""
    from trdb.parser import parse_expression
    from trdb.parser.ast import BinaryOp, FuncCall

    product = parse_expression("A.v @ B.v * 2")
    assert isinstance(product, BinaryOp) and product.op == "*" and isinstance(product.left, FuncCall)
    assert product.left.name == "MATMUL"
    total = parse_expression("A.v + B.v @ C.v")
    assert isinstance(total, BinaryOp) and total.op == "+" and total.right.name == "MATMUL"
    chained = parse_expression("A.v @ B.v @ C.v")
    assert chained.name == "MATMUL" and chained.args[0].name == "MATMUL"


@pytest.mark.parametrize("statement,size", [
    ("CREATE TENSOR T SHAPE (10, 10) TILE (20, 20) FILL ZEROS", "20, 20"),
    ("CREATE TENSOR T SHAPE (10, 10) TILE (5, 11)", "11)"),
    ("CREATE TENSOR T FROM COO e (i, j, x) SHAPE (4, 4) TILE (8, 2)", "8, 2"),
])
def test_a_tile_past_its_shape_is_a_syntax_level_error_under_the_size(statement, size):
    from trdb.parser import ParseError, parse

    with pytest.raises(ParseError) as failure:
        parse(statement)
    assert "does not fit SHAPE" in failure.value.message and failure.value.column == statement.index(size) + 1
    assert failure.value.hint.startswith("TILE (")


def test_from_coo_takes_a_query_as_written():
    from trdb.parser import parse
    from trdb.parser.ast import SubqueryRef

    text = "CREATE TENSOR G FROM COO (SELECT dst, src, w FROM edges WHERE w > 0) (dst, src, w) SHAPE (8, 8) TILE (4, 4)"
    node = parse(text)
    assert isinstance(node.source, SubqueryRef) and node.columns == ("dst", "src", "w")
    assert text[node.source.span.start:node.source.span.end] == "(SELECT dst, src, w FROM edges WHERE w > 0)"


def test_a_trailing_comma_in_shape_and_tile_is_python_s_one_tuple():
    con = trdb.connect()
    con.execute("CREATE TENSOR v SHAPE (4,) TILE (2,) FILL ONES")
    assert con.execute("SELECT * FROM v").fetch_tensor().tolist() == [1.0, 1.0, 1.0, 1.0]
    with pytest.raises(trdb.ProgrammingError, match="syntax error"):
        con.execute("CREATE TENSOR w SHAPE (,) TILE (2) FILL ONES")
    con.close()
