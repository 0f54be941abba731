"""The catalog's format version (upgrades, newer files refused) and crafted catalog entries (a DataError naming the tensor)."""
from __future__ import annotations

import duckdb
import numpy as np
import pytest

import trdb
from trdb.storage.catalog_format import FORMAT_VERSION


@pytest.fixture
def path(tmp_path):
    path = str(tmp_path / "crafted.trdb")
    with trdb.connect(path) as con:
        con.execute("CREATE TENSOR W SHAPE (4,4) TILE (2,2) FILL ONES")
        con.execute("CREATE TENSOR G SHAPE (4,4) TILE (2,2) FILL CONSTANT(2)")  # the guard: stays readable
        con.execute("CREATE VIEW s AS SELECT SUM(SUMSQ(W.v)) AS v FROM W")
    return path


def _tamper(path: str, *statements: str) -> None:
    con = duckdb.connect(path)
    for statement in statements:
        con.execute(statement)
    con.close()


def _table_of(path: str, name: str) -> str:
    con = duckdb.connect(path, read_only=True)
    table = con.execute("SELECT tile_table FROM _trdb.tensors WHERE name = ?", [name]).fetchone()[0]
    con.close()
    return table


def _to_format_1(path: str) -> None:
    """What every trdb before the stored format wrote: no format table, no data versions."""
    _tamper(path, "DROP TABLE _trdb.format", "DROP SEQUENCE _trdb.data_versions",
            "ALTER TABLE _trdb.tensors DROP COLUMN data_version", "ALTER TABLE _trdb.tensors DROP COLUMN location")


def test_a_database_of_format_1_is_upgraded_when_opened(path):
    _to_format_1(path)
    with pytest.raises(trdb.OperationalError, match="open it once without read_only"):
        trdb.connect(path, read_only=True)
    with trdb.connect(path) as con:
        assert con.execute("SELECT version FROM _trdb.format").fetchall() == [(FORMAT_VERSION,)]
        np.testing.assert_array_equal(con.execute("SELECT * FROM W").fetch_tensor(), np.ones((4, 4)))
        con.execute("UPDATE W SET v = W.v * 3")
        assert con.execute("SELECT * FROM s").fetchone()[0] == 9 * 16
    with trdb.connect(path, read_only=True) as con:
        assert con.execute("SELECT * FROM W").fetch_tensor().sum() == 48


def test_a_database_of_format_3_moves_adam_s_step_counts_into_the_parameters_rows(path, tmp_path):
    """Format 3 kept Adam's step counts in a table of their own (keyed by the name MINIMIZE was given, any case);
    opened to write, a file of it has them in its parameters' catalog rows, a count without its parameter
    gone, and MINIMIZE goes on from them as on the file that never changed format."""
    step = "MINIMIZE s WRT (W) WITH (optimizer = 'adam', learning_rate = 0.1, steps = 2)"
    with trdb.connect(path) as con:
        con.execute(step)
    copy = str(tmp_path / "format3.trdb")
    with open(path, "rb") as source, open(copy, "wb") as target:
        target.write(source.read())
    _tamper(copy, "DROP VIEW _trdb.adam_steps", "CREATE TABLE _trdb.adam_steps (param VARCHAR PRIMARY KEY, step BIGINT)",
            "INSERT INTO _trdb.adam_steps VALUES ('w', 2), ('gone', 7)",
            "ALTER TABLE _trdb.tensors DROP COLUMN adam_step", "DROP TABLE _trdb.small_tiles",
            "UPDATE _trdb.format SET version = 3")
    with pytest.raises(trdb.OperationalError, match="open it once without read_only"):
        trdb.connect(copy, read_only=True)
    with trdb.connect(copy) as con, trdb.connect(path) as unchanged:
        assert con.execute("SELECT param, step FROM _trdb.adam_steps").fetchall() == [("W", 2)]
        assert con.execute(step).fetchall() == unchanged.execute(step).fetchall()
        np.testing.assert_array_equal(con.execute("SELECT * FROM W").fetch_tensor(),
                                      unchanged.execute("SELECT * FROM W").fetch_tensor())
        assert con.execute("SELECT param, step FROM _trdb.adam_steps").fetchall() == [("W", 4)]


def test_a_database_from_a_newer_trdb_is_refused(path):
    _tamper(path, "UPDATE _trdb.format SET version = 99")
    with pytest.raises(trdb.OperationalError, match="written by a newer trdb .catalog format 99"):
        trdb.connect(path)


CRAFTED = [
    ("keys", "'garbage'"), ("keys", "'null'"), ("keys", "'[1, 2]'"), ("keys", "'[\"i\", \"i\"]'"),
    ("keys", "'[\"i\", \"j\\u0000\"]'"), ("value_name", "NULL"), ("dtype", "'complex128'"),
    ("dtype", "'garbage'"), ("shape", "NULL"), ("shape", "'null'"), ("shape", "'garbage'"),
    ("shape", "'[16.5, 16]'"), ("shape", "'[-4, 4]'"), ("shape", "'[99999999999999999999999999, 4]'"),
    ("shape", "'[4]'"), ("tile", "'[0, 2]'"), ("tile", "'[2]'"), ("tile", "'[true, 2]'"),
    ("tile_table", "'_trdb.tiles_999'"), ("tile_table", "'main.t'"),
    ("tile_table", "'_trdb.tiles_1; COPY (SELECT 42) TO ''injected.csv''; --'"),
    ("tuple_count", "-1"), ("nnz", "NULL"), ("distinct_keys", "'garbage'"), ("data_version", "-5"),
    ("location", "'/etc'"),
]


@pytest.mark.parametrize("column,value", CRAFTED, ids=[f"{c}={v}" for c, v in CRAFTED])
def test_a_crafted_catalog_entry_makes_only_its_tensor_unreadable(path, tmp_path, monkeypatch, column, value):
    monkeypatch.chdir(tmp_path)
    _tamper(path, f"UPDATE _trdb.tensors SET {column} = {value} WHERE name = 'W'")
    with trdb.connect(path) as con:
        for statement in ("SELECT * FROM W", "SELECT * FROM s", "UPDATE W SET v = W.v + 1",
                          "SELECT G.i, G.j, G.v + W.v AS v FROM G JOIN W ON G.i = W.i AND G.j = W.j"):
            with pytest.raises(trdb.DataError, match='tensor "W" is damaged and cannot be read') as error:
                con.execute(statement)
            assert "DROP TENSOR" in str(error.value)
        assert con.execute("SELECT * FROM G").fetch_tensor().sum() == 32
        con.execute("DROP TENSOR W")  # how a damaged tensor is removed
        con.execute("CREATE TENSOR W SHAPE (2,2) TILE (2,2) FILL ONES")
        assert con.execute("SELECT * FROM W").fetch_tensor().sum() == 4
    assert not (tmp_path / "injected.csv").exists()


def test_a_tile_table_without_not_null_keys_is_damaged(path):
    table = _table_of(path, "W")
    _tamper(path, f"ALTER TABLE {table} ALTER COLUMN k0 DROP NOT NULL",
            f"INSERT INTO {table} SELECT NULL, k1, nnz, v, fmt FROM {table} LIMIT 1")
    with trdb.connect(path) as con:
        with pytest.raises(trdb.DataError, match='"W" is damaged.*NOT NULL BIGINT column k0'):
            con.execute("SELECT * FROM W")


def test_a_tile_table_with_its_keys_swapped_is_damaged(path):
    # tiles are appended by position: keys in another order would be written transposed, so it is refused
    table = _table_of(path, "W")
    _tamper(path, f"CREATE TABLE _trdb.swapped AS SELECT k1, k0, nnz, v, fmt FROM {table}",
            f"DROP TABLE {table}", f"ALTER TABLE _trdb.swapped RENAME TO {table.split('.')[1]}",
            f"ALTER TABLE {table} ALTER COLUMN k0 SET NOT NULL", f"ALTER TABLE {table} ALTER COLUMN k1 SET NOT NULL",
            f"ALTER TABLE {table} ALTER COLUMN nnz SET NOT NULL", f"ALTER TABLE {table} ALTER COLUMN v SET NOT NULL")
    with trdb.connect(path) as con:
        with pytest.raises(trdb.DataError, match='"W" is damaged.*columns k1, k0, nnz, v, fmt, not k0, k1, nnz, v, fmt'):
            con.execute("UPDATE W SET v = v * 2")
        assert con.execute("SELECT * FROM G").fetch_tensor().sum() == 32


@pytest.mark.parametrize("change,message", [
    ("INSERT INTO {t} SELECT * FROM {t} WHERE k0 = 0 AND k1 = 0", r"more than one tile at key \(0, 0\)"),
    ("UPDATE {t} SET k0 = 7 WHERE k0 = 1 AND k1 = 1", r'"W" has a.* tile at key \(7, 1\)'),
    ("UPDATE {t} SET k1 = -1 WHERE k0 = 1 AND k1 = 1", r"tile at key \(1, -1\), outside"),
])
def test_crafted_tile_keys_are_a_data_error(path, change, message):
    table = _table_of(path, "W")
    _tamper(path, change.format(t=table))
    with trdb.connect(path) as con:
        with pytest.raises(trdb.DataError, match=message):
            con.execute("SELECT * FROM W")
        assert con.execute("SELECT * FROM G").fetch_tensor().sum() == 32


def test_a_write_stores_its_statistics_under_a_new_data_version(path):
    def row():
        con = duckdb.connect(path, read_only=True)
        found = con.execute("SELECT tuple_count, nnz, data_version FROM _trdb.tensors WHERE name = 'W'").fetchall()
        con.close()
        return found
    [(tuples, nnz, version)] = row()
    assert (tuples, nnz) == (4, 16)
    with trdb.connect(path) as con:
        con.execute("UPDATE W SET v = v * 0 WHERE i = 0")
    [(tuples, nnz, new_version)] = row()
    assert nnz == 8 and new_version > version
    with trdb.connect(path) as con:
        assert con.execute("SELECT SUM(SUMSQ(v)) FROM W").fetchall()[0][0] == 8


def test_small_and_large_appends_read_back_alike(tmp_path):
    # a few small tiles go in as one parameterized INSERT, larger batches through an Arrow scan
    rng = np.random.default_rng(5)
    small = rng.standard_normal((3, 4)).astype(np.float32)
    sparse = np.where(rng.random((64, 64)) < 0.02, rng.standard_normal((64, 64)), 0).astype(np.float64)
    large = rng.standard_normal((600, 600)).astype(np.float32)
    path = str(tmp_path / "appends.trdb")
    with trdb.connect(path) as con:
        for name, value, tile in (("S", small, "(2, 2)"), ("C", sparse, "(32, 32)"), ("L", large, "(512, 512)")):
            con.execute(f"CREATE TENSOR {name} FROM ? TILE {tile}", [value])
    with trdb.connect(path) as con:
        cur = con.cursor()
        for name, value in (("S", small), ("C", sparse), ("L", large)):
            np.testing.assert_array_equal(cur.execute(f"SELECT * FROM {name}").fetch_tensor(), value)
