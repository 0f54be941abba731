"""Names cannot inject SQL, and plain SQL may read trdb's _trdb schema but never write it or trdb's settings."""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from trdb.storage.plain_sql import check_plain_sql
from trdb.storage.sql_text import qualified_name, quote_identifier


def _catalog(cur) -> list:
    """Everything trdb keeps: its tables with their rows, its sequences, and the DuckDB settings it owns."""
    tables = cur.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = '_trdb' "
                         "ORDER BY table_name").fetchall()
    state = [(name, sorted(map(repr, cur.execute(f"SELECT * FROM _trdb.{name}").fetchall()))) for (name,) in tables]
    sequences = cur.execute("SELECT sequence_name, last_value FROM duckdb_sequences() "
                            "WHERE schema_name = '_trdb' ORDER BY 1").fetchall()
    settings = cur.execute("SELECT name, value FROM duckdb_settings() WHERE name IN "
                           "('memory_limit', 'threads', 'force_compression', 'temp_directory', 'schema', "
                           "'search_path', 'default_order') ORDER BY name").fetchall()
    databases = cur.execute("SELECT database_name FROM duckdb_databases() ORDER BY 1").fetchall()
    return [state, sequences, settings, databases]


@pytest.fixture
def tensors(cur):
    T, other = np.arange(8, dtype=np.float32), np.full((4, 4), 3.0, dtype=np.float32)
    cur.execute("CREATE TENSOR T FROM ? TILE (2)", [T])
    cur.execute("CREATE TENSOR Other FROM ? TILE (2, 2)", [other])
    return T, other


def _tile_table(cur, name: str) -> str:
    return cur.execute("SELECT tile_table FROM _trdb.tensors WHERE lower(name) = ?", [name.lower()]).fetchall()[0][0]


def _duckdb(cur, sql: str) -> None:
    """Run SQL on DuckDB itself, as another program making the database file would."""
    session = cur.connection._session()
    session.db.execute(sql)
    session.catalog.forget_ordinary_tables()


def _other_intact(cur, other) -> None:
    np.testing.assert_array_equal(cur.execute("SELECT * FROM Other").fetch_tensor(), other)


# ------------------------------------------------------------ quoting names


def test_quote_identifier_doubles_quotes():
    assert quote_identifier('t" WHERE 1=0; --') == '"t"" WHERE 1=0; --"'
    assert qualified_name("_trdb", "tiles_1") == '"_trdb"."tiles_1"'


def test_crafted_table_name_joined_with_a_tensor_is_just_a_name(cur, tensors):
    T, other = tensors
    doomed = _tile_table(cur, "Other")
    name = f't" WHERE 1=0; DROP TABLE {doomed}; SELECT "src", "w" FROM "t'
    quoted = quote_identifier(name)
    with pytest.raises(trdb.ProgrammingError):  # plain SQL naming _trdb in a write is refused, even in a name
        cur.execute(f"CREATE TABLE {quoted} (src INTEGER, w DOUBLE)")
    _duckdb(cur, f"CREATE TABLE {quoted} (src INTEGER, w DOUBLE)")
    _duckdb(cur, f"INSERT INTO {quoted} VALUES (1, 2.0)")
    cur.execute(f"SELECT T.i, T.v * p.w AS v FROM T JOIN {quoted} AS p ON T.i = p.src")
    expected = np.zeros_like(T)
    expected[2:4] = T[2:4] * 2
    np.testing.assert_array_equal(cur.fetch_tensor(), expected)
    _other_intact(cur, other)


def test_crafted_column_name_joined_with_a_tensor_is_just_a_name(cur, tensors):
    T, other = tensors
    column = 'src" FROM "pick"; DROP SCHEMA _trdb CASCADE; SELECT "src'
    quoted = quote_identifier(column)
    _duckdb(cur, f"CREATE TABLE pick ({quoted} INTEGER, w DOUBLE)")
    cur.execute("INSERT INTO pick VALUES (0, 3.0)")
    cur.execute(f"SELECT T.i, T.v * p.w AS v FROM T JOIN pick AS p ON T.i = p.{quoted}")
    expected = np.zeros_like(T)
    expected[0:2] = T[0:2] * 3
    np.testing.assert_array_equal(cur.fetch_tensor(), expected)
    _other_intact(cur, other)
    assert cur.execute("SELECT count(*) FROM _trdb.tensors").fetchall() == [(2,)]


def test_describe_of_a_quoted_weird_name(cur):
    cur.execute('CREATE TABLE "weird ""name""; DROP TABLE x" (a INTEGER)')
    rows = cur.execute('DESCRIBE "weird ""name""; DROP TABLE x"').fetchall()
    assert [row[0] for row in rows] == ["a"]


# ------------------------------------------------------------ plain SQL and the catalog

REFUSED = [
    "DROP SCHEMA _trdb CASCADE",
    'drop schema "_TRDB" cascade',
    "UPDATE _trdb.tensors SET tuple_count = 0",
    'DELETE FROM "_TRDB".tensors',
    "DELETE FROM _trdb.{tiles}",
    "INSERT INTO _trdb.{tiles} SELECT * FROM _trdb.{tiles}",
    "INSERT INTO memory /**/ . _trdb . {tiles} SELECT * FROM _trdb.{tiles}",
    "/* hidden */ DELETE FROM _trdb.{tiles}",
    "TRUNCATE _trdb.{tiles}",
    'DROP TABLE "_trdb"."{tiles}"',
    "CREATE TABLE _trdb.x AS SELECT 1",
    "CREATE VIEW _trdb.v AS SELECT 1",
    "CREATE MACRO _trdb.m(a) AS a",
    "CREATE SEQUENCE _trdb.s",
    "CREATE INDEX i ON _trdb.{tiles} (k0)",
    "ALTER TABLE _trdb.tensors RENAME TO y",
    "COMMENT ON TABLE _trdb.tensors IS 'x'",
    "WITH gone AS (DELETE FROM _trdb.{tiles} RETURNING *) SELECT count(*) FROM gone",
    "EXPLAIN ANALYZE DELETE FROM _trdb.{tiles}",
    "PREPARE p AS DELETE FROM _trdb.{tiles}",
    "SELECT setval('_trdb.data_versions', 1)",
    "SELECT nextval('_tr' || 'db.data_versions')",
    "COPY _trdb.{tiles} FROM '/nonexistent.csv'",
    "USE _trdb",
    "SET schema = '_trdb'",
    "SET search_path = '_trdb'",
    "SET search_path = concat('_tr', 'db')",
    "ATTACH ':memory:' AS elsewhere",
    "DETACH memory",
    "PRAGMA import_database('/nonexistent')",  # DuckDB's import (IMPORT DATABASE is trdb's restore)
    "SET max_memory = '1GB'",
    "SET GLOBAL memory_limit = '1GB'",
    "PRAGMA threads = 1",
    "SET threads = 1",
    "RESET worker_threads",
    "SET force_compression = 'zstd'",
    "SET max_temp_directory_size = '1GB'",
    "SET default_order = 'DESC'",
]


@pytest.mark.parametrize("statement", REFUSED)
def test_plain_sql_cannot_write_the_catalog(cur, tensors, statement):
    text = statement.format(tiles=_tile_table(cur, "Other").split(".", 1)[1])
    before = _catalog(cur)
    with pytest.raises(trdb.ProgrammingError) as caught:
        cur.execute(text)
    assert "plain SQL" in str(caught.value)
    assert _catalog(cur) == before
    _other_intact(cur, tensors[1])


def test_refusal_explains_itself():
    with pytest.raises(trdb.ProgrammingError) as caught:
        check_plain_sql("DROP SCHEMA _trdb CASCADE")
    assert "_trdb" in caught.value.message and "SELECT" in caught.value.hint
    with pytest.raises(trdb.ProgrammingError) as caught:
        check_plain_sql("SET threads = 2")
    assert "threads" in caught.value.message and "SET workers" in caught.value.hint


def test_plain_sql_still_reads_the_catalog(cur, tensors):
    tiles = _tile_table(cur, "Other")
    assert cur.execute("SELECT count(*) FROM _trdb.tensors").fetchall() == [(2,)]
    assert cur.execute(f"SELECT count(*) FROM {tiles}").fetchall() == [(4,)]
    assert cur.execute("DESCRIBE _trdb.tensors").fetchall()
    assert cur.execute("EXPLAIN SELECT * FROM _trdb.tensors").fetchall()
    cur.execute("CREATE TABLE names AS SELECT name FROM _trdb.tensors")
    cur.execute("INSERT INTO names SELECT name FROM _trdb.tensors")
    assert cur.execute("SELECT count(*) FROM names").fetchall() == [(4,)]
    assert cur.execute("SELECT current_setting('threads') > 0").fetchall() == [(True,)]
    cur.execute("CHECKPOINT")


def test_ordinary_plain_sql_still_writes(cur):
    cur.execute("CREATE SCHEMA s2")
    cur.execute("CREATE TABLE s2.t (a INTEGER)")
    cur.execute("INSERT INTO s2.t VALUES (1)")
    cur.execute("WITH gone AS (DELETE FROM s2.t RETURNING *) SELECT count(*) FROM gone")
    cur.execute("SET search_path = 'main,s2'")
    cur.execute("RESET search_path")
    cur.execute("DROP SCHEMA s2 CASCADE")


def test_forbidden_second_statement_runs_nothing(cur, tensors):
    cur.execute("CREATE TABLE log (a INTEGER)")
    before = _catalog(cur)
    with pytest.raises(trdb.ProgrammingError):
        cur.execute(f"INSERT INTO log VALUES (1); DELETE FROM {_tile_table(cur, 'Other')}")
    assert _catalog(cur) == before
    _other_intact(cur, tensors[1])


def test_one_piece_that_duckdb_splits_is_checked_statement_by_statement():
    # the text reaches the check as one piece: each statement DuckDB finds in it is checked
    with pytest.raises(trdb.ProgrammingError):
        check_plain_sql("SELECT 1; DROP SCHEMA _trdb CASCADE")
    check_plain_sql("SELECT ';'; SELECT 2")
