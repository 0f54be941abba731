"""Small tensors of one tile share `_trdb.small_tiles` (storage/small_tiles.py): every statement reads and writes
them as it does a tensor with its own table, a MINIMIZE step writes all of theirs in one UPDATE, and files
from before the shared table keep working."""
from __future__ import annotations

import duckdb
import numpy as np
import pytest

import trdb
from trdb.storage import small_tiles, tile_parts
from trdb.storage.database import Database


def _tables(path: str) -> dict[str, str]:
    con = duckdb.connect(path, read_only=True)
    found = dict(con.execute("SELECT name, tile_table FROM _trdb.tensors").fetchall())
    con.close()
    return found


def _shared_rows(path: str) -> list[tuple]:
    con = duckdb.connect(path, read_only=True)
    rows = con.execute("SELECT owner, nnz FROM _trdb.small_tiles ORDER BY owner").fetchall()
    con.close()
    return rows


def test_one_small_tile_is_a_row_of_the_shared_table_and_larger_tensors_keep_their_own(tmp_path):
    path = str(tmp_path / "s.trdb")
    with trdb.connect(path) as con:
        con.execute("CREATE TENSOR W FROM ? TILE (4, 3)", [np.arange(12, dtype=np.float32).reshape(4, 3)])
        con.execute("CREATE TENSOR b FROM ? TILE (3)", [np.ones(3, np.float32)])
        con.execute("CREATE TENSOR T FROM ? TILE (2, 3)", [np.ones((4, 3), np.float32)])  # two tiles
        con.execute("CREATE TENSOR L SHAPE (200, 200) TILE (200, 200) FILL ONES")  # 160 KB: too large to share
    tables = _tables(path)
    assert small_tiles.is_small(tables["W"]) and small_tiles.is_small(tables["b"])
    assert tables["T"].startswith("_trdb.tiles_") and tables["L"].startswith("_trdb.tiles_")
    assert _shared_rows(path) == sorted([(small_tiles.owner(tables["W"]), 11), (small_tiles.owner(tables["b"]), 3)])


def test_statements_on_small_tensors_give_numpy_s_values_and_leave_no_rows_behind(tmp_path):
    path = str(tmp_path / "s.trdb")
    w = np.arange(12, dtype=np.float64).reshape(4, 3) - 5
    with trdb.connect(path) as con:
        con.execute("CREATE TENSOR W FROM ? TILE (4, 3)", [w])
        con.execute("CREATE TENSOR Z SHAPE (4, 3) TILE (4, 3)")  # no tile: zeros
        con.execute("UPDATE W SET v = v * 2 + 1")
        w = w * 2 + 1
        con.execute("INSERT INTO Z SELECT i, j, v * 3 AS v FROM W")
        np.testing.assert_array_equal(con.execute("SELECT * FROM Z").fetch_tensor(), w * 3)
        con.execute("DELETE FROM Z")
        assert con.execute("SELECT COUNT(*) FROM Z").fetchone()[0] == 0
        np.testing.assert_array_equal(con.execute("SELECT * FROM Z").fetch_tensor(), np.zeros((4, 3)))
        con.execute("CREATE OR REPLACE TENSOR Z FROM ? TILE (4, 3)", [np.eye(4, 3)])
        assert con.execute("SELECT SUM(SUMSQ(W.v * Z.v)) AS v FROM W JOIN Z ON W.i = Z.i AND W.j = Z.j"
                           ).fetchone()[0] == pytest.approx(float(np.sum((w * np.eye(4, 3)) ** 2)))
        with pytest.raises(trdb.Error):  # a failing statement leaves W as it was
            con.execute("UPDATE W SET v = v / missing.v FROM missing")
        con.execute("DROP TENSOR Z")
    with trdb.connect(path) as con:
        np.testing.assert_array_equal(con.execute("SELECT * FROM W").fetch_tensor(), w)
    assert [owner for owner, _ in _shared_rows(path)] == [small_tiles.owner(_tables(path)["W"])]


@pytest.mark.parametrize("width", [4, 64])  # 6 tiles of 0.5 KB in all, of 100 KB
def test_a_minimize_step_writes_every_small_tensor_in_one_update(tmp_path, monkeypatch, width):
    """Two parameters and their four Adam moments: one UPDATE of the shared table a step (not six), and the
    same weights and losses as a database whose tensors each have their own table."""
    statements = []
    execute, run_over_arrow = Database.execute, Database.run_over_arrow
    monkeypatch.setattr(Database, "execute", lambda self, sql, *args: statements.append(sql) or execute(self, sql, *args))
    monkeypatch.setattr(Database, "run_over_arrow",
                        lambda self, data, sql: statements.append(sql) or run_over_arrow(self, data, sql))

    def run(con):
        con.execute(f"CREATE TENSOR X FROM ? TILE (16, {width}) DTYPE float64",
                    [np.random.default_rng(1).standard_normal((16, width))])
        con.execute(f"CREATE TENSOR W SHAPE ({width}, {width - 1}) TILE ({width}, {width - 1}) DTYPE float64 "
                    "FILL RANDOM_NORMAL(0, 0.3, 5)")
        con.execute(f"CREATE TENSOR U SHAPE ({width - 1}, 2) TILE ({width - 1}, 2) DTYPE float64 "
                    "FILL RANDOM_NORMAL(0, 0.3, 6)")
        con.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(MATMUL(MATMUL(X.v, W.v), U.v) - 1)) AS v "
                    "FROM X JOIN W ON X.j = W.i JOIN U ON W.j = U.i")
        statements.clear()
        losses = [con.execute("MINIMIZE loss WRT (W, U) WITH (optimizer = 'adam', learning_rate = 0.05, steps = 1)"
                              ).fetchall() for _ in range(4)]
        return losses, con.execute("SELECT * FROM W").fetch_tensor(), con.execute("SELECT * FROM U").fetch_tensor()

    with trdb.connect(str(tmp_path / "shared.trdb")) as con:
        shared = run(con)
    updates = [s for s in statements if s.startswith(f"UPDATE {small_tiles.TABLE}")]
    assert len(updates) == 4  # one a step: the parameters (the first step writes the moments afresh), then all six tiles
    monkeypatch.setattr(small_tiles, "SMALL_TILE_BYTES", 0)  # every tensor its own table
    with trdb.connect(str(tmp_path / "own.trdb")) as con:
        own = run(con)
    assert not any(small_tiles.is_small(t) for t in _tables(str(tmp_path / "own.trdb")).values())
    assert shared[0] == own[0]
    np.testing.assert_array_equal(shared[1], own[1])
    np.testing.assert_array_equal(shared[2], own[2])


def test_the_shared_table_takes_no_more_tensors_than_one_part_holds(tmp_path, monkeypatch):
    """Its rows at the most a small tile takes stay within a part (DuckDB commits a row group whole)."""
    monkeypatch.setattr(tile_parts, "PART_BYTES", 3 * small_tiles.SMALL_TILE_BYTES)
    path = str(tmp_path / "s.trdb")
    with trdb.connect(path) as con:
        for n in range(5):
            con.execute(f"CREATE TENSOR t{n} SHAPE (2) TILE (2) FILL ONES")
        assert con.execute("SELECT * FROM t4").fetch_tensor().sum() == 2
    small = [name for name, table in _tables(path).items() if small_tiles.is_small(table)]
    assert sorted(small) == ["t0", "t1", "t2"]


def test_a_file_of_format_3_is_upgraded_when_opened_to_write_and_its_tensors_keep_their_tables(tmp_path):
    path = str(tmp_path / "old.trdb")
    with trdb.connect(path) as con:
        con.execute("CREATE TENSOR B SHAPE (4, 4) TILE (2, 2) FILL ONES")
    con = duckdb.connect(path)  # what trdb of format 3 wrote: no shared table
    con.execute("DROP TABLE _trdb.small_tiles")
    con.execute("DROP VIEW _trdb.adam_steps")
    con.execute("ALTER TABLE _trdb.tensors DROP COLUMN adam_step")
    con.execute("UPDATE _trdb.format SET version = 3")
    con.close()
    with trdb.connect(path) as con:
        assert con.execute("SELECT * FROM B").fetch_tensor().sum() == 16
        con.execute("CREATE TENSOR S FROM ? TILE (2, 2)", [np.full((2, 2), 3.0)])
        assert con.execute("SELECT SUM(SUMSQ(B.v * S.v)) AS v FROM B JOIN S ON B.i = S.i AND B.j = S.j"
                           ).fetchone()[0] == 36
        assert con.execute("SELECT version FROM _trdb.format").fetchall() == [(4,)]
    assert small_tiles.is_small(_tables(path)["S"])


@pytest.mark.parametrize("change,message", [
    ("UPDATE _trdb.tensors SET shape = '[4, 4]' WHERE name = 'S'", "holds one tile a tensor, but its grid has more"),
    ("DROP TABLE _trdb.small_tiles", "small_tiles, which is missing"),
    ("INSERT INTO _trdb.small_tiles SELECT * FROM _trdb.small_tiles", r"more than one tile at key \(0, 0\)"),
])
def test_a_crafted_small_tensor_is_damaged_and_the_others_stay_readable(tmp_path, change, message):
    path = str(tmp_path / "s.trdb")
    with trdb.connect(path) as con:
        con.execute("CREATE TENSOR S FROM ? TILE (2, 2)", [np.full((2, 2), 3.0)])
        con.execute("CREATE TENSOR G SHAPE (4, 4) TILE (2, 2) FILL ONES")
    con = duckdb.connect(path)
    con.execute(change)
    con.close()
    with trdb.connect(path) as con:
        with pytest.raises(trdb.DataError, match=message):
            con.execute("SELECT * FROM S")
        assert con.execute("SELECT * FROM G").fetch_tensor().sum() == 16


def test_updates_of_a_small_tensor_write_its_row_over_and_leave_no_deleted_rows(tmp_path):
    """An UPDATE writes the one tile over its row (a DELETE and an INSERT each time left a deleted row that
    DuckDB keeps: a loop of them grew the file); the values are numpy's."""
    path = str(tmp_path / "s.trdb")
    w = np.arange(12, dtype=np.float64).reshape(4, 3)
    with trdb.connect(path) as con:
        con.execute("CREATE TENSOR W FROM ? TILE (4, 3)", [w])
        con.execute("CREATE TENSOR Z SHAPE (4, 3) TILE (4, 3)")  # no tile: an UPDATE writes nothing
        for step in range(30):
            con.execute("UPDATE W SET v = v * 0.5 + 1")
            w = w * 0.5 + 1
            con.execute("UPDATE Z SET v = v + 1")
        con.execute("UPDATE W SET v = v * 0 WHERE i = 0")  # a zero tile is a value: stored over the old one
        np.testing.assert_array_equal(con.execute("SELECT * FROM W").fetch_tensor(), w * 0)
        assert con.execute("SELECT COUNT(*) FROM W").fetchone()[0] == 1
        assert con.execute("SELECT COUNT(*) FROM Z").fetchone()[0] == 0
    con = duckdb.connect(path, read_only=True)
    stored = con.execute("SELECT estimated_size FROM duckdb_tables() WHERE table_name = 'small_tiles'").fetchone()[0]
    con.close()
    assert stored == 1
