"""Hostile input gets a trdb error of the right PEP 249 class, never a raw Python exception."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import trdb


def test_a_non_hex_blob_literal_is_a_programming_error(cur) -> None:
    with pytest.raises(trdb.ProgrammingError):
        cur.execute("SELECT X'é'")
    cur.execute("SELECT 1")


def test_hundreds_of_chained_ctes_run(cur) -> None:
    cur.execute("CREATE TENSOR A FROM ? TILE (4, 4)", [np.ones((8, 8), np.float32)])
    ctes = ["C0 AS (SELECT A.i, A.j, A.v FROM A)"] + [
        f"C{k} AS (SELECT C{k - 1}.i, C{k - 1}.j, C{k - 1}.v + 1 AS v FROM C{k - 1})" for k in range(1, 300)]
    cur.execute("WITH " + ", ".join(ctes) + " SELECT * FROM C299")
    rows = cur.fetchall()
    assert len(rows) == 4 and np.all(rows[0][2] == 300)


def test_fetch_arrow_on_describe(cur) -> None:
    cur.execute("CREATE TENSOR T SHAPE (4, 4) TILE (2, 2) FILL ONES")
    cur.execute("DESCRIBE T")
    table = cur.fetch_arrow()
    assert isinstance(table, pa.Table) and table.column("shape").to_pylist() == ["2", "2", "[4, 4]"]


def test_fetchnumpy_on_ragged_list_columns(cur) -> None:
    cur.execute("SELECT [1, 2] AS l UNION ALL SELECT [3]")
    column = cur.fetchnumpy()["l"]
    assert column.dtype == object and sorted(len(v) for v in column) == [1, 2]


def test_key_literals_and_arithmetic_stay_in_bigint(cur) -> None:
    cur.execute("CREATE TENSOR A FROM ? TILE (4, 4)", [np.ones((8, 8), np.float32)])
    with pytest.raises(trdb.DataError, match="BIGINT"):
        cur.execute("SELECT A.i FROM A WHERE A.i = 99999999999999999999")
    with pytest.raises(trdb.DataError, match="out of range for BIGINT"):
        cur.execute("SELECT A.i + 9223372036854775807 AS k FROM A WHERE A.i = 1")
    with pytest.raises(trdb.DataError, match="out of range for BIGINT"):
        cur.execute("SELECT A.i FROM A WHERE A.i * 9223372036854775807 * 4 > 0")


def test_a_tile_larger_than_the_shape_is_an_error_under_it(cur) -> None:
    """SHAPE and TILE are written side by side: a TILE past the SHAPE is a mistake to point at, not to cut."""
    for statement in ("CREATE TENSOR T SHAPE (4, 4) TILE (2, 8) FILL ONES",
                      "CREATE TABLE e (i INT, j INT, x DOUBLE); CREATE TENSOR T FROM COO e (i, j, x) SHAPE (4, 4) "
                      "TILE (2, 8)"):
        *setup, create = statement.split("; ")
        for text in setup:
            cur.execute(text)
        with pytest.raises(trdb.ProgrammingError) as failure:
            cur.execute(create)
        message = str(failure.value)
        assert "TILE (2, 8) does not fit SHAPE (4, 4): 8 > 4 on axis 1" in message
        assert message.splitlines()[2].index("^") == len("LINE 1: ") + create.index("8)")
        assert "HINT: TILE (2, 4)" in message
    with pytest.raises(trdb.ProgrammingError, match='"T" does not exist'):
        cur.execute("SELECT * FROM T")


def test_a_tile_larger_than_an_array_is_clamped(cur) -> None:
    """FROM ? TILE (...) names no shape: one TILE for arrays of any size stores a small one as one tile."""
    cur.execute("CREATE TENSOR T FROM ? TILE (8, 8)", [np.ones((4, 4), np.float32)])
    cur.execute("DESCRIBE T")
    assert cur.fetchall()[-1][4] == "[4, 4]"
    cur.execute("SELECT * FROM EINSUM('ij,ij,ij->ij', T, T, T)")
    (row,) = cur.fetchall()
    assert np.array_equal(row[2], np.ones((4, 4), np.float32))


def test_random_uniform_needs_low_below_high(cur) -> None:
    with pytest.raises(trdb.ProgrammingError, match="low must not exceed high"):
        cur.execute("CREATE TENSOR U SHAPE (3, 3) TILE (3, 3) FILL RANDOM_UNIFORM(1, 0)")


@pytest.mark.parametrize("dtype, value", [("int32", "1e29"), ("int64", "1e30"), ("float16", "1e30"),
                                          ("int32", "1.5"), ("float32", "1e300")])
def test_a_constant_the_dtype_cannot_hold_is_a_data_error(cur, dtype, value) -> None:
    with pytest.raises(trdb.DataError, match="FILL"):
        cur.execute(f"CREATE TENSOR Q SHAPE (3, 3) TILE (3, 3) DTYPE {dtype} FILL CONSTANT({value})")
    with pytest.raises(trdb.ProgrammingError, match="does not exist"):
        cur.execute("SELECT * FROM Q")


def test_constants_that_fit_are_stored_exactly(cur) -> None:
    cur.execute("CREATE TENSOR Q SHAPE (2, 2) TILE (2, 2) DTYPE int64 FILL CONSTANT(9007199254740992)")
    cur.execute("SELECT Q.v FROM Q")
    assert cur.fetchone()[0][0, 0] == 2 ** 53


def test_a_coo_value_overflowing_float32_is_a_data_error(cur) -> None:
    entries = pa.table({"r": [0, 1], "c": [0, 1], "x": [1.0, 1e300]})
    with pytest.raises(trdb.DataError, match="overflows DTYPE float32"):
        cur.execute("CREATE TENSOR S FROM COO ? (r, c, x) SHAPE (2, 2) TILE (2, 2)", [entries])
    cur.execute("CREATE TENSOR S FROM COO ? (r, c, x) SHAPE (2, 2) TILE (2, 2) DTYPE float64", [entries])


def test_arithmetic_inside_queries_follows_ieee(cur) -> None:
    cur.execute("CREATE TENSOR F SHAPE (2, 2) TILE (2, 2) FILL CONSTANT(3e38)")
    cur.execute("SELECT F.i, F.j, F.v * 10 AS v FROM F")
    assert np.all(np.isinf(cur.fetchone()[2]))
