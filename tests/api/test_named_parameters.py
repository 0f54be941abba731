"""sqlite3's named placeholders (`:name` with a mapping) beside DuckDB's `$name` and `$1`, in trql and plain SQL."""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from helpers.small_tensor import A, connection_with_a  # noqa: F401 (the `con` fixture)
from trdb.api.named_parameters import colon_placeholders


def test_colon_names_bind_from_a_mapping_in_trql_and_plain_sql(con):
    got = con.execute("SELECT A.i, A.j, A.v * :scale + :shift AS v FROM A", {"scale": 2.0, "shift": 1.0})
    np.testing.assert_array_equal(got.fetch_tensor(), A * 2 + 1)
    assert con.execute("SELECT :a + :b AS s, :a * 10 AS t", {"a": 2, "b": 1}).fetchall() == [(3, 20)]
    con.execute("CREATE TABLE people (name VARCHAR, age INTEGER)")
    con.executemany("INSERT INTO people VALUES (:name, :age)", [{"name": "ann", "age": 30}, {"name": "bo", "age": 40}])
    assert con.execute("SELECT name FROM people WHERE age > :min", {"MIN": 35}).fetchall() == [("bo",)]
    assert con.execute("SELECT $a + :b AS s", {"a": 1, "b": 2}).fetchall() == [(3,)]  # both are named


def test_colons_that_are_not_placeholders_stay(con):
    assert con.execute("SELECT ':a' AS q, :a::VARCHAR AS c, [10, 20, 30][2:3] AS sl -- :zz", {"a": 5}).fetchall() \
        == [(":a", "5", [20, 30])]
    assert con.execute("SELECT [10, 20, 30][:n] AS s FROM (SELECT 2 AS n)", {}).fetchall() == [([10, 20],)]
    assert con.execute("SELECT [:a, :a] AS l, {'k': :a} AS st", {"a": 1}).fetchall() == [([1, 1], {"k": 1})]
    assert con.execute("SELECT \"x:a\" FROM (SELECT 1 AS \"x:a\") /* :b */", {}).fetchall() == [(1,)]


def test_the_rewrite_keeps_every_position():
    text = "SELECT :a, ':b', x::INT, l[:n], $$ :c $$ FROM t WHERE y = :d"
    out = colon_placeholders(text, {"a": 1, "d": 2})
    assert out == "SELECT $a, ':b', x::INT, l[:n], $$ :c $$ FROM t WHERE y = $d" and len(out) == len(text)
    assert colon_placeholders("SELECT 1", {}) == "SELECT 1"


def test_a_missing_name_is_an_error_with_a_caret_and_a_hint(con):
    with pytest.raises(trdb.ProgrammingError, match="no value for the named parameter :scal") as caught:
        con.execute("SELECT A.i, A.j,\n  A.v * :scal AS v FROM A", {"scale": 2.0})
    error = caught.value
    assert (error.line, error.column) == (2, 9) and error.hint == "did you mean :scale?"
    assert "LINE 2:   A.v * :scal AS v FROM A" in str(error)
    with pytest.raises(trdb.ProgrammingError, match="named parameter :x") as caught:
        con.execute("SELECT :x", {})
    assert "empty" in caught.value.hint
    with pytest.raises(trdb.ProgrammingError, match="unused b"):
        con.execute("SELECT A.v * :a AS v FROM A", {"a": 1.0, "b": 2.0})


def test_errors_after_the_rewrite_quote_the_statement_as_written(con):
    with pytest.raises(trdb.ProgrammingError) as caught:
        con.execute("SELECT A.nothing * :a AS v FROM A", {"a": 1.0})
    assert caught.value.statement == "SELECT A.nothing * :a AS v FROM A"


def test_parameters_of_another_kind_are_refused(con):
    with pytest.raises(trdb.ProgrammingError, match=r"a mapping \(for \$name and :name\), got int"):
        con.execute("SELECT :a", 5)
