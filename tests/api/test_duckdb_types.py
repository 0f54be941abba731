"""Every DuckDB type through plain SQL comes back as DuckDB's own Python API returns it; Arrow keeps dtypes."""
from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest

import trdb

EXPRESSIONS = [
    "true::BOOLEAN", "1::TINYINT", "1::SMALLINT", "1::INTEGER", "1::BIGINT",
    "170141183460469231731687303715884105727::HUGEINT", "1::UTINYINT", "1::USMALLINT", "1::UINTEGER",
    "1::UBIGINT", "1::UHUGEINT", "1.5::FLOAT", "1.5::DOUBLE", "'nan'::DOUBLE", "1.25::DECIMAL(4, 2)",
    "123456789012345678901234.5::DECIMAL(38, 1)", "'x'::VARCHAR", "'\\xAA\\x00'::BLOB", "'2020-01-02'::DATE",
    "'infinity'::DATE", "'03:04:05.123'::TIME", "'03:04:05+02'::TIMETZ", "'2020-01-02 03:04:05.5'::TIMESTAMP",
    "'2020-01-02 03:04:05'::TIMESTAMP_S", "'2020-01-02 03:04:05.123'::TIMESTAMP_MS",
    "'2020-01-02 03:04:05.123456789'::TIMESTAMP_NS", "'2020-01-02 03:04:05+02'::TIMESTAMPTZ",
    "INTERVAL '1 year 2 days 3 seconds'", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::UUID", "[1, 2, NULL]",
    "[[1], [2, 3]]", "[1, 2]::INTEGER[2]", "{'a': 1, 'b': 'x'}", "MAP {'k': 1, 'l': 2}",
    "union_value(num := 2)::UNION(num INTEGER, str VARCHAR)", "'happy'::ENUM('sad', 'happy')", "'101'::BIT",
    "{'l': [{'m': MAP {1: [2.5]}}]}", "[{'a': '2020-01-01'::DATE}]", "'{\"a\": 1}'::JSON", "NULL",
    "12345678901234567890123456789::BIGNUM",
]


@pytest.fixture(scope="module")
def connections():
    oracle, con = duckdb.connect(), trdb.connect(workers=1)
    yield oracle, con
    oracle.close()
    con.close()


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_each_type_comes_back_as_duckdb_returns_it(connections, expression):
    oracle, con = connections
    sql = f"SELECT {expression} AS x, {expression} AS y"
    want = oracle.execute(sql)
    want_type, want_rows = str(want.description[0][1]), want.fetchall()
    cur = con.execute(sql)
    got = cur.fetchall()
    assert cur.description[0][1] == want_type
    assert repr(got) == repr(want_rows)  # repr: NaN equals NaN, and types show
    assert [type(v) for v in got[0]] == [type(v) for v in want_rows[0]]


def test_catalog_functions_with_structs_and_maps(connections):
    oracle, con = connections
    # tags is a MAP, labels a LIST; the built-in types only (the two may have loaded different extensions)
    sql = ("SELECT type_name, logical_type, tags, labels FROM duckdb_types() "
           "WHERE type_name IN ('BIGINT', 'VARCHAR', 'DOUBLE', 'INTERVAL') ORDER BY ALL")
    assert con.execute(sql).fetchall() == oracle.execute(sql).fetchall()
    assert con.execute("SELECT {'a': 1} AS s").fetchall() == [({"a": 1},)]
    assert con.execute("SELECT count(*) FROM duckdb_tables()").fetchall()[0][0] >= 0


def test_arrow_keeps_float32_and_scalar_columns_are_numeric(connections):
    _, con = connections
    sql = "SELECT 1.5::FLOAT AS f, 2::TINYINT AS t, 1.25::DECIMAL(4, 2) AS d, DATE '2020-01-02' AS day"
    schema = con.execute(sql).fetch_arrow().schema
    assert [str(t) for t in schema.types] == ["float", "int8", "decimal128(4, 2)", "date32[day]"]
    con.execute("CREATE TENSOR A FROM ? TILE (2, 2)", [np.ones((4, 4), np.float32)])
    query = "SELECT A.i, A.j, SUMSQ(A.v) AS s FROM A ORDER BY A.i, A.j"
    assert str(con.execute(query).fetch_arrow().schema.field("s").type) == "float"
    rows = con.execute(query).fetchall()
    assert isinstance(rows[0][2], np.float32) and isinstance(rows[0][0], int)
    frame = pd.DataFrame(rows, columns=["i", "j", "s"])
    assert [str(t) for t in frame.dtypes] == ["int64", "int64", "float32"]
    assert frame["s"].sum() == 16.0
