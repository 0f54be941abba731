"""DuckDB's Python conveniences in trdb: con.sql relations, df(), register, replacement scans, $ parameters."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import trdb
from helpers.small_tensor import A, connection_with_a  # noqa: F401 (the `con` fixture)


def test_sql_relation_fetches_in_every_form_and_runs_again(con, capsys):
    rel = con.sql("SELECT * FROM A")
    assert rel.columns == ["i", "j", "v"] and rel.types[2] == trdb.TENSOR
    np.testing.assert_array_equal(rel.tensor(), A)  # the first fetch reads con.sql's run, the others run again
    assert len(rel.fetchall()) == 6
    table = rel.to_arrow_table()
    assert table.column_names == ["i", "j", "v", "v_shape"] and table.num_rows == 6
    reader = rel.arrow()  # DuckDB 2.x: a RecordBatchReader
    assert isinstance(reader, pa.RecordBatchReader) and reader.read_all().num_rows == 6
    frame = rel.df()
    assert list(frame.columns) == ["i", "j", "v"] and str(frame["i"].dtype) == "int64"
    np.testing.assert_array_equal(frame["v"][0], A[:2, :2])
    rel.show()
    assert "| i " in capsys.readouterr().out
    assert con.sql("CREATE TENSOR B SHAPE (2) TILE (2)") is None  # no result set: None, as DuckDB
    plain = con.sql("SELECT 1.5::FLOAT AS x, 2 AS y")
    assert [str(t) for t in plain.df().dtypes] == ["float32", "int32"] and plain.fetchone() == (1.5, 2)


def test_cursor_df_and_fetch_long(con):
    cur = con.cursor()
    frame = cur.execute("SELECT A.i, A.j, SUMSQ(A.v) AS s FROM A ORDER BY A.i, A.j").fetchdf()
    assert [str(t) for t in frame.dtypes] == ["int64", "int64", "float32"]
    assert frame["s"].sum() == np.square(A).sum()
    long = cur.execute("SELECT * FROM A WHERE A.i = 1").fetch_long().to_pandas()
    assert list(long.columns) == ["i", "j", "v"] and len(long) == 5  # the one row of tiles with i = 1
    assert sorted(zip(long["i"], long["j"], long["v"])) == [(2, j, A[2, j]) for j in range(5)]


def test_register_and_replacement_scans(con):
    edges = pd.DataFrame({"src": [0, 1, 2], "dst": [1, 0, 2], "w": [0.5, 2.0, 3.0]})
    con.execute("CREATE TENSOR G FROM COO edges (src, dst, w) SHAPE (3, 3) TILE (2, 2)")  # a Python variable
    dense = np.zeros((3, 3), np.float32)
    dense[[0, 1, 2], [1, 0, 2]] = [0.5, 2.0, 3.0]
    np.testing.assert_array_equal(con.sql("SELECT * FROM G").tensor(), dense)
    arrow_edges = pa.table({"n": [1, 2, 3]})  # noqa: F841 (read by the statement, by name)
    assert con.execute("SELECT sum(n) FROM arrow_edges").fetchall() == [(6,)]
    # gone once the statement is over
    assert con.execute("SELECT * FROM duckdb_views() WHERE view_name = 'arrow_edges'").fetchall() == []
    con.register("people", pd.DataFrame({"age": [30, 40]}))
    assert con.execute("SELECT avg(age) FROM people").fetchall() == [(35.0,)]
    con.unregister("people")
    with pytest.raises(trdb.Error):
        con.execute("SELECT avg(age) FROM people")
    with pytest.raises(trdb.IntegrityError):
        con.register("A", edges)
    v = edges  # noqa: F841 (a variable that is named where no table goes is not read)
    con.execute("CREATE TENSOR v SHAPE (2) TILE (2) FILL ONES")
    assert con.sql("SELECT * FROM v").tensor().tolist() == [1.0, 1.0]  # the tensor wins over the variable


def test_dollar_parameters(con):
    got = con.execute("SELECT A.i, A.j, A.v * $2 + $1 AS v FROM A", [1.0, 2.0]).fetch_tensor()
    np.testing.assert_array_equal(got, A * 2 + 1)
    got = con.execute("SELECT A.i, A.j, A.v * $scale AS v FROM A", {"scale": 3.0}).fetch_tensor()
    np.testing.assert_array_equal(got, A * 3)
    assert con.execute("SELECT $a + $b AS s", {"a": 2, "b": 1}).fetchall() == [(3,)]
    assert con.execute("SELECT $2 - $1 AS s", [2, 10]).fetchall() == [(8,)]
    with pytest.raises(trdb.ProgrammingError, match="missing \\$scale"):
        con.execute("SELECT A.v * $scale AS v FROM A", {"scal": 3.0})
    with pytest.raises(trdb.ProgrammingError, match="cannot mix"):
        con.execute("SELECT A.v * ? + $1 AS v FROM A", [1.0])


def test_read_only_connection(tmp_path):
    path = str(tmp_path / "ro.trdb")
    with trdb.connect(path, workers=1) as con:
        con.execute("CREATE TENSOR A SHAPE (2) TILE (2) FILL ONES")
    with trdb.connect(path, read_only=True, workers=1) as con:
        assert con.sql("SELECT * FROM A").tensor().tolist() == [1.0, 1.0]
        with pytest.raises(trdb.Error):
            con.execute("DROP TENSOR A")


def test_polars_frames_load_register_and_are_scanned_by_name(con):
    pl = pytest.importorskip("polars")
    edges = pl.DataFrame({"src": [0, 1, 2], "dst": [1, 0, 2], "w": [0.5, 2.0, 3.0]})  # noqa: F841 (read by name)
    con.execute("CREATE TENSOR G FROM COO edges (src, dst, w) SHAPE (3, 3) TILE (2, 2)")
    dense = np.zeros((3, 3), np.float32)
    dense[[0, 1, 2], [1, 0, 2]] = [0.5, 2.0, 3.0]
    np.testing.assert_array_equal(con.sql("SELECT * FROM G").tensor(), dense)
    assert con.execute("SELECT sum(w) FROM edges").fetchall() == [(5.5,)]
    con.execute("CREATE TENSOR P FROM ?", [pl.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0]})])
    np.testing.assert_array_equal(con.sql("SELECT * FROM P").tensor(), [[1.0, 3.0], [2.0, 4.0]])
    con.register("people", pl.DataFrame({"age": [30, 40]}))
    assert con.execute("SELECT avg(age) FROM people").fetchall() == [(35.0,)]
