"""DuckDB's Python API as its documentation shows it, in trdb: executemany, table, read_parquet, from_df, the module's
default connection, a relation's explain(), shape, pl(), printing, and a tensor result as numpy and DLPack."""
from __future__ import annotations

import gc
import os
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import trdb
from helpers.small_tensor import A, connection_with_a  # noqa: F401 (the `con` fixture)


def test_items_example_of_the_db_api_page(con):
    con.execute("CREATE TABLE items (item VARCHAR, value DECIMAL(10, 2), count INTEGER)")
    con.execute("INSERT INTO items VALUES ('jeans', 20.0, 1), ('hammer', 42.2, 2)")
    cur = con.executemany("INSERT INTO items VALUES (?, ?, ?)", [["chainsaw", 500, 10], ["iphone", 300, 2]])
    assert isinstance(cur, trdb.Cursor) and cur.rowcount == 2
    assert con.execute("SELECT item FROM items WHERE value > ?", [400]).fetchall() == [("chainsaw",)]
    assert con.execute("SELECT $my_param", {"my_param": 5}).fetchall() == [(5,)]


def test_table_gives_a_relation_of_a_table_or_a_tensor(con):
    con.sql("CREATE TABLE test_table (i INTEGER)")
    con.sql("INSERT INTO test_table VALUES (42)")
    rel = con.table("test_table")
    assert isinstance(rel, trdb.Relation) and rel.fetchall() == [(42,)] and rel.shape == (1, 1)
    np.testing.assert_array_equal(con.table("A").tensor(), A)
    assert con.table("a").shape == (6, 3)  # names are case-insensitive, as DuckDB's
    with pytest.raises(trdb.ProgrammingError, match="does not exist"):
        con.table("test_tabel")
    with pytest.raises(trdb.ProgrammingError, match="takes the name"):
        con.table("")


def test_read_parquet_of_a_file_a_list_and_options(con, tmp_path):
    con.execute("CREATE TABLE t AS SELECT range AS x, 'n' || range AS s FROM range(5)")
    path = str(tmp_path / "it's.parquet")  # a quote in the path is quoted, never spliced
    con.execute(f"COPY t TO '{path.replace(chr(39), chr(39) * 2)}'")
    rel = con.read_parquet(path)
    assert rel.columns == ["x", "s"] and rel.fetchall() == [(n, f"n{n}") for n in range(5)]
    both = con.read_parquet([path, path], filename=True)
    assert both.shape == (10, 3) and both.columns[-1] == "filename"
    assert trdb.read_parquet(path).shape == (5, 2)  # the module's function, on the default connection
    csv = tmp_path / "t.csv"
    csv.write_text("a;b\n1;x\n2;y\n")
    assert con.read_csv(csv, sep=";", header=True).fetchall() == [(1, "x"), (2, "y")]
    with pytest.raises(trdb.ProgrammingError, match="not an option name"):
        con.read_parquet(path, **{"x) --": 1})
    with pytest.raises(trdb.ProgrammingError, match="a path, a glob or a list"):
        con.read_parquet(42)
    with pytest.raises(trdb.Error):
        con.read_parquet(str(tmp_path / "missing.parquet"))


def test_from_df_and_from_arrow_read_the_frame_while_the_relation_lives(con):
    frame = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    rel = con.from_df(frame)
    assert rel.columns == ["a", "b"] and rel.fetchall() == [(1, "x"), (2, "y"), (3, "z")]
    assert rel.df().equals(frame) and len(rel) == 3  # read again: the frame stays registered
    assert con.from_arrow(pa.table({"n": [1.5, 2.5]})).fetchall() == [(1.5,), (2.5,)]
    assert trdb.from_df(frame).shape == (3, 2)
    with pytest.raises(trdb.ProgrammingError, match="DataFrame or Arrow data, got list"):
        con.from_df([1, 2])


def test_the_frame_of_a_relation_gone_is_unregistered_before_the_next_statement(con):
    frames = "SELECT count(*) FROM duckdb_views() WHERE view_name LIKE 'trdb_frame_%'"
    rel = con.from_df(pd.DataFrame({"a": [1]}))
    assert con.execute(frames).fetchall() == [(1,)]
    del rel
    con.execute("SELECT 1")  # (a replacement scan read this frame's locals: Python 3.11 kept them until now)
    gc.collect()
    assert con.execute(frames).fetchall() == [(0,)]


def test_module_level_sql_uses_one_default_connection():
    assert trdb.sql("SELECT 42").fetchall() == [(42,)]
    assert trdb.default_connection() is trdb.default_connection()
    trdb.execute("CREATE OR REPLACE TABLE module_level_items (i INTEGER)")
    trdb.executemany("INSERT INTO module_level_items VALUES (?)", [[1], [2]])
    assert trdb.table("module_level_items").fetchall() == [(1,), (2,)]
    assert trdb.query("SELECT count(*) FROM module_level_items").fetchone() == (2,)
    other = trdb.connect(workers=1)
    assert trdb.sql("SELECT 7", connection=other).fetchall() == [(7,)]
    other.close()


def test_explain_and_shape(con):
    rel = con.sql("SELECT * FROM A")
    assert rel.shape == (6, 3) and len(rel) == 6  # (rows, columns) as DuckDB's; the tensor's is tensor().shape
    assert "TensorScanExec(A" in rel.explain()
    assert "actual tuples=6" in rel.explain("analyze")
    con.execute("CREATE TABLE t AS SELECT range AS x FROM range(3)")
    assert "Table: memory.main.t" in con.table("t").explain()
    with pytest.raises(trdb.ProgrammingError, match="unknown type 'physical'"):
        rel.explain("physical")
    assert rel.sql_query() == "SELECT * FROM A"


def test_print_shows_a_box_of_the_first_and_last_rows(con, capsys):
    print(con.sql("SELECT range AS i, range * 2 AS j FROM range(100)"))
    out = capsys.readouterr().out
    firsts = [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│")]
    assert out.startswith("┌") and firsts == ["i"] + [str(n) for n in range(10)] + ["..."] + [str(n) for n in range(90, 100)]
    assert "(100 rows, 20 shown)" in out
    text = repr(con.sql("SELECT * FROM A"))
    assert "[[0. 1.]" in text and "(6 rows)" in text and "trdb.Relation" not in text
    closed = trdb.connect(workers=1)
    rel = closed.sql("SELECT 1")
    closed.close()
    assert "the connection is closed" in repr(rel)


def test_repr_html_for_notebooks(con):
    page = con.sql("SELECT range AS i, '<b>' AS s FROM range(30)")._repr_html_()
    assert page.startswith("<table") and "<th>i<br><small>BIGINT</small></th>" in page
    assert "&lt;b&gt;" in page and "<b>" not in page  # values are escaped
    assert page.count("<tr>") == 1 + 20 + 1 and "&hellip;" in page and "30 rows, 20 shown" in page
    assert "<pre" in con.sql("SELECT * FROM A")._repr_html_()  # a small tile as numpy prints it


def test_a_tensor_result_is_an_array_for_numpy_and_dlpack(con):
    np.testing.assert_array_equal(np.asarray(con.sql("SELECT * FROM A")), A)
    assert np.asarray(con.sql("SELECT * FROM A"), dtype=np.float64).dtype == np.float64
    torch = pytest.importorskip("torch")
    tensor = torch.from_dlpack(con.sql("SELECT A.i, A.j, A.v * 2 AS v FROM A"))
    assert tensor.dtype == torch.float32 and torch.equal(tensor, torch.from_numpy(A * 2))


def test_a_table_result_is_refused_as_an_array_with_a_hint(con):
    con.execute("CREATE TABLE t AS SELECT range AS x, range AS y FROM range(3)")
    rel = con.sql("SELECT * FROM t")
    with pytest.raises(trdb.InterfaceError, match=r"2 plain column\(s\) \(x, y\), not a tensor") as caught:
        np.asarray(rel)
    assert "rel.fetchnumpy()" in caught.value.hint
    with pytest.raises(trdb.InterfaceError, match="not a tensor"):
        rel.__dlpack__()
    torch = pytest.importorskip("torch")
    with pytest.raises(trdb.InterfaceError, match="from_dlpack"):
        torch.from_dlpack(rel)


def test_pl_gives_a_polars_frame_with_tiles_as_arrays(con):
    pl = pytest.importorskip("polars")
    frame = con.sql("SELECT * FROM A WHERE A.i = 0 AND A.j < 2").pl()
    assert isinstance(frame, pl.DataFrame) and frame.columns == ["i", "j", "v"]
    assert frame.schema["v"] == pl.Array(pl.Float32, (2, 2))
    np.testing.assert_array_equal(frame["v"].to_numpy()[1], A[:2, 2:4])
    assert con.execute("SELECT 1 AS x, 'a' AS s").pl().rows() == [(1, "a")]


def test_pl_without_polars_says_how_to_install_it(con, monkeypatch):
    monkeypatch.setitem(sys.modules, "polars", None)  # import polars now fails, installed or not
    cur = con.execute("SELECT * FROM A")
    with pytest.raises(trdb.InterfaceError, match="needs polars") as caught:
        cur.pl()
    assert "pip install polars" in caught.value.hint
    assert len(cur.fetchall()) == 6  # the rows stay to be fetched


def test_scroll(con):
    cur = con.execute("SELECT range FROM range(10)")
    cur.scroll(7, "absolute")
    assert cur.fetchone() == (7,)
    cur.scroll(-3)
    assert cur.fetchone() == (5,) and cur.rownumber == 6
    with pytest.raises(IndexError):
        cur.scroll(5)
    with pytest.raises(trdb.ProgrammingError, match="unknown mode"):
        cur.scroll(0, "sideways")


@pytest.mark.on_cpu  # of host memory_limit (conftest.py)
def test_a_spilled_result_prints_and_scrolls_without_holding_its_rows(tmp_path):
    con = trdb.connect(workers=1)
    big = np.arange(96 * 96, dtype=np.float64).reshape(96, 96)  # 72 KB of tiles: more than memory_limit
    con.execute("CREATE TENSOR B FROM ? TILE (4, 4)", [big])
    con.execute("SET memory_limit = '64KB'")
    con.execute(f"SET temp_directory = '{tmp_path / 'spill'}'")
    text = repr(con.sql("SELECT B.i, B.j, B.v FROM B ORDER BY B.i, B.j"))
    firsts = [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│") and "│" in line[1:]]
    assert "(576 rows, 20 shown)" in text and firsts[0] == "i" and "23" in firsts and "..." in firsts
    cur = con.execute("SELECT B.i, B.j, B.v FROM B ORDER BY B.i, B.j")
    assert [f for d, _, files in os.walk(tmp_path / "spill") if "duckdb" not in d for f in files]  # spilled
    cur.scroll(575, "absolute")
    i, j, tile = cur.fetchone()
    assert (i, j) == (23, 23) and tile.tolist() == big[92:, 92:].tolist()
    cur.scroll(-570)
    assert cur.fetchone()[:2] == (0, 6)
    con.close()
