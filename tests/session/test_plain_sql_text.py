"""Plain SQL and SET as DuckDB reads them: statement splitting, transactions, settings, Arrow output settings."""
from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import trdb
from trdb.config.settings import SETTINGS
from trdb.parser import split_statements
from trdb.storage.plain_sql import check_plain_sql, run_plain_sql
from trdb.storage.tile_codec import decode_tiles


@pytest.fixture
def table(cur):
    cur.execute("CREATE TABLE t (v INTEGER)")
    cur.execute("INSERT INTO t VALUES (1)")
    return cur


# ------------------------------------------------------------ statement splitting (DuckDB's lexical rules)

SCRIPTS = [
    r"SELECT E'\''; SELECT 2",
    r"SELECT e'a\\'; SELECT 'b'",
    r"SELECT E'\'; SELECT 2; --'",
    r"SELECT E'it''s; \n'; SELECT 2",
    "SELECT $$; COMMIT; $$; SELECT 2",
    "SELECT $tag$ $$; ' $tag$; SELECT 2",
    "SELECT $a$x$b$;$a$; SELECT $1",
    "SELECT a$$b FROM (SELECT 1 AS \"a$$b\"); SELECT 2",
    "SELECT 1 /* outer /* inner; */ still; */; SELECT 2",
    "SELECT 1 -- a comment; with a semicolon\n; SELECT \"x;\"\"y\" FROM (SELECT 1 AS \"x;\"\"y\")",
    "SELECT (E'x;'), [E'\\';']; SELECT 'plain\\'; SELECT 3",
]


@pytest.mark.parametrize("script", SCRIPTS)
def test_splitter_finds_the_statements_duckdb_finds(script):
    ours = [piece.text for piece in split_statements(script)]
    duckdbs = duckdb.extract_statements(script)
    assert len(ours) == len(duckdbs)
    for piece in ours:  # each piece is one statement for DuckDB too
        assert len(duckdb.extract_statements(piece)) == 1


def test_a_dollar_quoted_semicolon_is_no_commit(table):
    table.execute("BEGIN")
    table.execute("UPDATE t SET v = 2")
    assert table.execute("SELECT $$; COMMIT; $$").fetchall() == [("; COMMIT; ",)]
    assert table.execute(r"SELECT E'\'; COMMIT; --'").fetchall() == [("'; COMMIT; --",)]
    table.execute("ROLLBACK")
    assert table.execute("SELECT v FROM t").fetchall() == [(1,)]


def test_a_commit_after_an_escaped_quote_is_trdbs_commit(table):
    # DuckDB reads E'\'' as one string: the COMMIT after it is a statement of its own, which trdb runs
    table.execute("BEGIN")
    table.execute("UPDATE t SET v = 2")
    table.execute(r"SELECT E'\''; COMMIT; -- '")
    table.execute("BEGIN")  # trdb knows its transaction ended
    table.execute("UPDATE t SET v = 3")
    table.execute("ROLLBACK")
    assert table.execute("SELECT v FROM t").fetchall() == [(2,)]


def test_text_duckdb_splits_in_two_never_runs_as_one(con):
    with pytest.raises(trdb.ProgrammingError, match="one statement"):
        run_plain_sql(con._session().db, "SELECT 1; SELECT 2")
    check_plain_sql("SELECT ';'; SELECT 2")  # the check alone still looks at each statement


@pytest.mark.parametrize("text", ["BEGIN READ ONLY", "START TRANSACTION READ WRITE", "BEGIN TRANSACTION READ ONLY"])
def test_plain_sql_cannot_begin_or_end_transactions(table, text):
    table.execute("BEGIN")
    table.execute("UPDATE t SET v = 2")
    with pytest.raises(trdb.ProgrammingError, match="transaction"):
        table.execute(text)
    table.execute("ROLLBACK")
    assert table.execute("SELECT v FROM t").fetchall() == [(1,)]
    with pytest.raises(trdb.ProgrammingError, match="transaction"):
        table.execute(text)
    table.execute("BEGIN")
    table.execute("ROLLBACK")


# ------------------------------------------------------------ SET: all or nothing, never DuckDB's

@pytest.mark.parametrize("value", ["/dev/null/below_a_file", "/proc/no_such_dir/spill"])
def test_a_failed_set_changes_no_setting(con, value):
    cur = con.cursor()
    before = cur.execute("SHOW temp_directory").fetchall()
    with pytest.raises(trdb.OperationalError, match="temp_directory"):
        cur.execute(f"SET temp_directory = '{value}'")
    assert cur.execute("SHOW temp_directory").fetchall() == before
    cur.execute("CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL ONES")
    assert cur.execute("SELECT COUNT(*) FROM A").fetchall() == [(4,)]


def test_a_failed_set_changes_no_setting_of_other_connections(tmp_path):
    path = str(tmp_path / "db.trdb")
    first, second = trdb.connect(path), trdb.connect(path)
    before = second.cursor().execute("SHOW temp_directory").fetchall()
    with pytest.raises(trdb.OperationalError):
        first.cursor().execute("SET temp_directory = '/dev/null/below_a_file'")
    assert second.cursor().execute("SHOW temp_directory").fetchall() == before
    first.close()
    second.close()


def _httpfs_loaded(cur) -> bool:
    return cur.execute("SELECT loaded FROM duckdb_extensions() WHERE extension_name = 'httpfs'").fetchall() == [(True,)]


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_set_of_a_trdb_setting_with_a_parameter_never_reaches_duckdb(cur, name):
    before = cur.execute(f"SHOW {name}").fetchall()
    for text in (f"SET {name} = ?", f"SET {name} TO $1"):
        try:
            cur.execute(text, ["http://127.0.0.1:9" if name == "s3_endpoint" else "1"])
        except trdb.ProgrammingError as exc:
            assert name in str(exc) and "Catalog Error" not in str(exc) and "extension" not in str(exc)
            assert cur.execute(f"SHOW {name}").fetchall() == before
    assert not _httpfs_loaded(cur)


@pytest.mark.parametrize("text", ["SET GLOBAL s3_endpoint = 'http://127.0.0.1:9'", "SET SESSION workers = 2",
                                  "RESET LOCAL workers", "SET s3_endpoint = 'a' || 'b'"])
def test_set_of_a_trdb_setting_trql_cannot_parse_is_refused_by_trdb(cur, text):
    with pytest.raises(trdb.ProgrammingError) as caught:
        cur.execute(text)
    assert "Catalog Error" not in str(caught.value) and "extension" not in str(caught.value)
    assert not _httpfs_loaded(cur)


def test_a_failed_connect_changes_no_setting_of_other_connections(tmp_path):
    path = str(tmp_path / "db.trdb")
    first = trdb.connect(path)
    before = first.cursor().execute("SHOW temp_directory").fetchall()
    with pytest.raises(trdb.OperationalError, match="temp_directory"):
        trdb.connect(path, temp_directory="/dev/null/below_a_file")
    assert first.cursor().execute("SHOW temp_directory").fetchall() == before
    first.close()


# ------------------------------------------------------------ DuckDB's Arrow output settings and tile reads

ARROW_SETTINGS = ["SET arrow_output_version = '1.5'", "SET arrow_large_buffer_size = true",
                  "SET produce_arrow_string_view = true", "SET arrow_lossless_conversion = true",
                  "SET GLOBAL arrow_output_version TO '1.5'", "PRAGMA arrow_output_version = '1.5'"]


@pytest.mark.parametrize("text", ARROW_SETTINGS)
def test_duckdb_arrow_settings_never_make_healthy_tiles_corrupt(cur, text):
    cur.execute("CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL ONES")
    try:
        cur.execute(text)
    except trdb.ProgrammingError as exc:
        assert "trdb" in str(exc)
    assert cur.execute("SELECT * FROM A").fetch_tensor().tolist() == [[1.0] * 4] * 4
    cur.execute("CREATE TENSOR B SHAPE (4, 4) TILE (2, 2) FILL ONES")  # written and read under the setting
    assert cur.execute("SELECT * FROM B").fetch_tensor().sum() == 16.0


@pytest.mark.parametrize("kind", [pa.binary(), pa.large_binary(), pa.binary_view()])
def test_tiles_decode_from_every_arrow_binary_kind(kind):
    tiles = [np.arange(4, dtype=np.float32).reshape(2, 2), np.ones((2, 2), np.float32)]
    column = pa.chunked_array([pa.array([t.tobytes() for t in tiles], kind)])
    decoded = decode_tiles(column, np.dtype(np.float32), [(2, 2), (2, 2)])
    assert [d.tolist() for d in decoded] == [t.tolist() for t in tiles]


def test_a_tile_column_of_text_is_still_corrupt():
    column = pa.chunked_array([pa.array(["abcd"], pa.string())])
    with pytest.raises(trdb.DataError, match="corrupt"):
        decode_tiles(column, np.dtype(np.uint8), [(4,)])


# ------------------------------------------------------------ deep nesting DuckDB is never asked to parse

def _nested(depth: int, inner: str = "1", cut: str = "") -> str:
    """`SELECT ((...inner...)) AS v` with `cut` put halfway through the closing parentheses."""
    return f"SELECT {'(' * depth}{inner}{')' * (depth // 2)}{cut}{')' * (depth - depth // 2)} AS v"


def test_a_deeply_nested_syntax_error_fails_without_duckdb_parsing_it(cur, monkeypatch):
    """The fuzzer's statement, 5,000 parentheses deep with a `*` among the closing ones, took 20 s and
    2.5 GB (DuckDB's parser, asked four times, grows as the square of the depth to report the error),
    which exhausted a bounded process: trql's own syntax error comes back, and DuckDB never sees the text."""
    cur.execute("CREATE TENSOR guard_vec SHAPE (40) TILE (16) FILL ONES")

    def never(*_args, **_kwargs):
        raise AssertionError("DuckDB was asked to parse the statement")
    monkeypatch.setattr(duckdb, "extract_statements", never)
    text = _nested(5000, "guard_vec.v", "*") + " FROM guard_vec"
    with pytest.raises(trdb.ProgrammingError, match='syntax error at or near "\\)"') as failed:
        cur.execute(text)
    assert len(str(failed.value).splitlines()[1]) < 120  # the LINE shown is a window around the fault
    assert cur.execute("SELECT i, v FROM guard_vec").fetch_tensor().sum() == 40


def test_plain_sql_nested_past_duckdbs_depth_is_refused_before_duckdb_reads_it(cur):
    cur.execute(_nested(500))  # plain SQL nested within DuckDB's bound runs as before
    assert cur.fetchone()[0] == 1
    with pytest.raises(trdb.ProgrammingError, match="nests parentheses more than 1000 deep"):
        check_plain_sql(_nested(1001))
    check_plain_sql("SELECT '" + "(" * 5000 + "' AS v")  # parentheses in a string do not nest
    check_plain_sql("SELECT 1 AS v /* " + "(" * 5000 + " */")
