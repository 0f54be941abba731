"""The public dbapi20 compliance suite (Stuart Bishop's, vendored as dbapi20.py beside this file) run against trdb."""
from __future__ import annotations

import datetime
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import trdb


def _vendored_suite():
    """tests/api/dbapi20.py, by its path: an installed `dbapi-compliance` package of another version never stands in."""
    spec = importlib.util.spec_from_file_location("dbapi20", Path(__file__).with_name("dbapi20.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dbapi20 = _vendored_suite()


class TestTrdbCompliance(dbapi20.DatabaseAPI20Test):
    driver = trdb
    connect_args = ()
    connect_kw_args = {"workers": 1}
    table_prefix = "dbapi20test_"
    lower_func = "lower"  # callproc calls a DuckDB function with SELECT, as psycopg does

    def test_non_idempotent_close(self):
        # the suite calls this disputed; trdb does what sqlite3 and DuckDB do: a second close() is a no-op
        con = self._connect()
        con.close()
        con.close()
        assert con.closed

    def test_nextset(self):
        # the suite leaves this to drivers (its own needs a stored procedure): one result set per statement
        con = self._connect()
        cur = con.cursor()
        cur.execute("SELECT 1 UNION ALL SELECT 2")
        assert cur.nextset() is None and cur.fetchall() == [(1,), (2,)]
        con.close()

    def test_setoutputsize(self):
        # the suite leaves this to drivers: trdb's setoutputsize does nothing, so no value is cut short
        con = self._connect()
        cur = con.cursor()
        cur.setoutputsize(2, 0)
        assert cur.execute("SELECT repeat('x', 100)").fetchone() == ("x" * 100,)
        con.close()


def test_fetching_after_a_statement_without_result_set_raises():
    """One rule for every statement without a result set: trdb's and DuckDB's DDL, SET, and writes of rows."""
    con = trdb.connect(workers=1)
    cur = con.cursor()
    with pytest.raises(trdb.Error):
        cur.fetchone()
    for sql in ("CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL ONES", "CREATE TABLE t (name VARCHAR)",
                "DROP TENSOR A", "SET workers = 1"):
        cur.execute(sql)
        assert cur.description is None
        for fetch in (cur.fetchone, cur.fetchall, lambda: cur.fetchmany(2)):
            with pytest.raises(trdb.InterfaceError, match="no result set"):
                fetch()
    cur.execute("CREATE TENSOR A SHAPE (4) TILE (2)")
    for sql, count in (("INSERT INTO t VALUES ('x'), ('y'), ('z')", 3), ("UPDATE t SET name = 'w' WHERE name > 'x'", 2),
                       ("DELETE FROM t WHERE name = 'x'", 1), ("CREATE TABLE u AS SELECT * FROM t", 2),
                       ("INSERT INTO A VALUES (1, ?)", 1)):
        cur.execute(sql, [np.ones(2, np.float32)] if "?" in sql else None)
        assert cur.description is None and cur.rowcount == count, sql  # DuckDB's count row is the rowcount
        with pytest.raises(trdb.InterfaceError, match="no result set"):
            cur.fetchall()
    assert cur.execute("INSERT INTO t VALUES ('v') RETURNING name").fetchall() == [("v",)]  # RETURNING: a query
    assert cur.execute('SELECT count(*) AS "Count" FROM t').fetchall() == [(3,)]
    assert cur.statusmessage is None and con.sql("DELETE FROM t") is None
    con.close()


def test_type_objects_constructors_and_optional_extensions():
    con = trdb.connect(workers=1)
    cur = con.cursor()
    assert cur.connection is con and cur.lastrowid is None and cur.messages == [] and cur.rownumber is None
    assert con.Error is trdb.Error and con.ProgrammingError is trdb.ProgrammingError
    cur.execute("SELECT ? AS d, ? AS t, ? AS ts, ? AS b, 1.5::DECIMAL(4, 2) AS n, 'x' AS s, 2::HUGEINT AS h, "
                "INTERVAL 1 DAY AS iv", [trdb.Date(2020, 1, 2), trdb.Time(3, 4, 5),
                                         trdb.Timestamp(2020, 1, 2, 3, 4, 5), trdb.Binary(b"\x00\x01")])
    codes = [d[1] for d in cur.description]
    assert codes[:3] == [trdb.DATETIME] * 3 and codes[3] == trdb.BINARY
    assert codes[4] == trdb.NUMBER and codes[5] == trdb.STRING and codes[6] == trdb.NUMBER
    assert codes[7] != trdb.NUMBER and codes[5] != trdb.NUMBER and codes[0] != trdb.STRING
    assert cur.fetchone()[:4] == (datetime.date(2020, 1, 2), datetime.time(3, 4, 5),
                                  datetime.datetime(2020, 1, 2, 3, 4, 5), b"\x00\x01")
    assert cur.rownumber == 1
    assert trdb.DateFromTicks(0) == datetime.date.fromtimestamp(0)
    assert trdb.TimestampFromTicks(86400.5) == datetime.datetime.fromtimestamp(86400).replace(microsecond=0)
    assert trdb.TimeFromTicks(0) == datetime.datetime.fromtimestamp(0).time()
    assert cur.callproc("upper", ["abc"]) == ("abc",) and cur.fetchall() == [("ABC",)]
    with pytest.raises(trdb.ProgrammingError):
        cur.callproc("no_such_function", [1])
    cur.execute("CREATE TENSOR T SHAPE (4) TILE (2) FILL ONES")
    assert cur.execute("SELECT * FROM T").description[1][1] == trdb.TENSOR
    con.close()
    con.close()  # as sqlite3: closing again is a no-op
    with pytest.raises(trdb.InterfaceError):
        cur.execute("SELECT 1")


def test_connection_context_manager_closes_as_duckdb_does(tmp_path):
    path = str(tmp_path / "ctx.trdb")
    with pytest.raises(ValueError):
        with trdb.connect(path, workers=1) as con:
            con.execute("CREATE TENSOR A SHAPE (2) TILE (2) FILL ONES")  # committed by itself: it stays
            raise ValueError
    assert con.closed
    with trdb.connect(path, workers=1) as con:
        con.execute("BEGIN")
        con.execute("CREATE TENSOR B SHAPE (2) TILE (2) FILL ONES")  # an open transaction is rolled back
    with trdb.connect(path, workers=1) as con:
        assert [r[0] for r in con.execute("SHOW TENSORS").fetchall()] == ["A"]
