"""Storage: zero tiles are never stored, files persist across processes, statements are atomic."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import trdb


def count(cur, name):
    cur.execute(f"SELECT COUNT(*) FROM {name}")
    return cur.fetchone()[0]


def test_fill_zeros_stores_every_tile_and_no_fill_stores_none(cur):
    cur.execute("CREATE TENSOR Z SHAPE (1000, 1000) TILE (100, 100) FILL ZEROS")
    assert count(cur, "Z") == 100  # zeros are values: a dense tensor keeps every tile
    cur.execute("SELECT COUNT(*) FROM _trdb.tiles_1")  # the tile table itself, through plain SQL
    assert cur.fetchone() == (100,)
    np.testing.assert_array_equal(cur.execute("SELECT * FROM Z").fetch_tensor(), np.zeros((1000, 1000), np.float32))
    cur.execute("CREATE TENSOR E SHAPE (1000, 1000) TILE (100, 100)")  # no FILL: empty, for INSERT to fill
    assert count(cur, "E") == 0
    cur.execute("CREATE TENSOR O SHAPE (10, 10) TILE (4, 4) FILL ONES")
    assert count(cur, "O") == 9


def test_array_with_zero_tiles_stores_every_tile_and_a_sparse_matrix_only_nonzero_ones(cur):
    import scipy.sparse as sp
    M = np.zeros((90, 60), np.float32)
    M[0:30, 0:20] = 1
    M[65, 59] = 2  # one element in the ragged corner tile
    cur.execute("CREATE TENSOR M FROM ? TILE (30, 20)", [M])
    assert count(cur, "M") == 9
    np.testing.assert_array_equal(cur.execute("SELECT * FROM M").fetch_tensor(shape=(90, 60)), M)
    cur.execute("CREATE TENSOR S FROM ? TILE (30, 20)", [sp.csr_matrix(M)])  # sparse on purpose
    assert count(cur, "S") == 2
    cur.execute("SELECT S.i, S.j FROM S ORDER BY i")
    assert cur.fetchall() == [(0, 0), (2, 2)]
    np.testing.assert_array_equal(cur.execute("SELECT * FROM S").fetch_tensor(shape=(90, 60)), M)


def test_update_to_zero_keeps_the_tiles(cur):
    cur.execute("CREATE TENSOR O SHAPE (10, 10) TILE (5, 5) FILL ONES")
    cur.execute("UPDATE O SET v = O.v * 0 WHERE O.i = 0")
    assert count(cur, "O") == 4
    expected = np.ones((10, 10), np.float32)
    expected[:5] = 0
    np.testing.assert_array_equal(cur.execute("SELECT * FROM O").fetch_tensor(), expected)


def test_file_database_survives_a_new_process(tmp_path):
    path = str(tmp_path / "x.trdb")
    A = np.arange(12, dtype=np.float64).reshape(3, 4)
    with trdb.connect(path) as con:
        con.execute("CREATE TENSOR A FROM ? TILE (2, 2)", [A])
        con.execute("CREATE VIEW twice AS SELECT A.i, A.j, A.v * 2 AS v FROM A")
    script = textwrap.dedent(f"""
        import numpy as np, trdb
        con = trdb.connect({path!r})
        print(con.execute("SELECT * FROM twice").fetch_tensor().tolist())
        print(con.execute("SHOW TENSORS").fetchall()[0][:5])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == str((A * 2).tolist())
    assert lines[1] == "('A', 'i, j', '[3, 4]', '[2, 2]', 'float64')"


def test_failing_create_as_leaves_nothing(cur):
    # a column of tiles whose edge tile has another shape: the sum fails only at run time, after the
    # first tiles of C have been computed
    cur.execute("CREATE TENSOR X SHAPE (6, 10) TILE (4, 4) FILL ONES")
    tables_before = cur.execute("SELECT count(*) FROM information_schema.tables").fetchone()
    with pytest.raises(trdb.DataError, match=r"SUM: tiles of one group have shapes"):
        cur.execute("CREATE TENSOR C AS SELECT X.j, SUM(X.v) AS v FROM X GROUP BY X.j")
    assert cur.execute("SELECT count(*) FROM information_schema.tables").fetchone() == tables_before
    with pytest.raises(trdb.ProgrammingError, match='"C" does not exist'):
        cur.execute("SELECT * FROM C")


def test_failing_create_as_on_layout_leaves_nothing(cur):
    cur.execute("CREATE TENSOR A SHAPE (8, 8) TILE (4, 4) FILL ONES")
    cur.execute("CREATE TENSOR B SHAPE (6, 6) TILE (4, 4) FILL ONES")
    # either of B's two misfitting edge tiles is named: which comes first depends on the order the workers
    # hand their batches on (within a batch the first in key order is)
    with pytest.raises(trdb.DataError, match=r"tile under key \((2, 1\) has shape \(4, 2|3, 1\) has shape \(2, 2)\)"):
        # B's ragged edge tiles moved below A are interior tiles of the result: they do not fit its grid
        cur.execute("CREATE TENSOR C AS SELECT A.i, A.j, A.v FROM A UNION ALL SELECT B.i + 2, B.j, B.v FROM B")
    with pytest.raises(trdb.IntegrityError, match="more than once"):
        cur.execute("CREATE TENSOR C AS SELECT A.i, A.j, A.v FROM A UNION ALL SELECT A.i, A.j, A.v FROM A")
    with pytest.raises(trdb.ProgrammingError, match='"C" does not exist'):
        cur.execute("SELECT * FROM C")
    assert [r[0] for r in cur.execute("SHOW TENSORS").fetchall()] == ["A", "B"]


def test_failing_update_mid_way_changes_nothing(cur):
    T = np.ones((8, 8), np.float32)
    cur.execute("CREATE TENSOR T FROM ? TILE (4, 4)", [T])
    cur.execute("CREATE TENSOR S SHAPE (8, 4) TILE (4, 4) FILL ONES")
    # keys (0, 0) and (1, 0) of T find a partner in S; the update writes tile (0, 0), then fails on a
    # duplicate target key (two partners for one tile) before anything is kept
    cur.execute("CREATE TABLE dup (k INTEGER)")
    cur.execute("INSERT INTO dup VALUES (0), (0)")
    with pytest.raises(trdb.IntegrityError, match="more than once"):
        cur.execute("UPDATE T SET v = T.v * 5 FROM dup WHERE T.i = dup.k")
    np.testing.assert_array_equal(cur.execute("SELECT * FROM T").fetch_tensor(), T)


def test_failing_insert_leaves_no_tiles(cur):
    cur.execute("CREATE TENSOR T SHAPE (4, 4) TILE (2, 2)")
    good, bad = np.ones((2, 2), np.float32), np.ones((3, 2), np.float32)
    with pytest.raises(trdb.DataError, match=r"shape \(3, 2\)"):
        cur.execute("INSERT INTO T VALUES (0, 0, ?), (0, 1, ?)", [good, bad])
    assert count(cur, "T") == 0
    cur.execute("INSERT INTO T VALUES (0, 0, ?)", [good])
    with pytest.raises(trdb.IntegrityError, match="already exists"):
        cur.execute("INSERT INTO T VALUES (1, 1, ?), (0, 0, ?)", [good, good])
    assert count(cur, "T") == 1


def test_rollback_undoes_a_transaction(con):
    cur = con.cursor()
    cur.execute("CREATE TENSOR T SHAPE (4, 4) TILE (2, 2) FILL ONES")
    cur.execute("BEGIN")
    cur.execute("UPDATE T SET v = T.v * 3")
    cur.execute("CREATE TENSOR U SHAPE (2, 2) TILE (2, 2) FILL ONES")
    assert float(cur.execute("SELECT SUM(SUMSQ(T.v)) FROM T").fetchone()[0]) == 16 * 9
    cur.execute("ROLLBACK")
    assert float(cur.execute("SELECT SUM(SUMSQ(T.v)) FROM T").fetchone()[0]) == 16
    with pytest.raises(trdb.ProgrammingError):
        cur.execute("SELECT * FROM U")


def test_error_in_transaction_aborts_it(con):
    cur = con.cursor()
    cur.execute("CREATE TENSOR T SHAPE (4, 4) TILE (2, 2) FILL ONES")
    cur.execute("BEGIN")
    cur.execute("UPDATE T SET v = T.v * 3")
    with pytest.raises(trdb.ProgrammingError):
        cur.execute("SELECT nope FROM T")
    with pytest.raises(trdb.OperationalError, match="aborted"):
        cur.execute("SELECT * FROM T")
    con.rollback()
    assert float(cur.execute("SELECT SUM(SUMSQ(T.v)) FROM T").fetchone()[0]) == 16


def test_commit_keeps_changes(con):
    cur = con.cursor()
    cur.execute("BEGIN")
    cur.execute("CREATE TENSOR T SHAPE (4, 4) TILE (2, 2) FILL CONSTANT(2)")
    con.commit()
    con.rollback()  # a no-op outside a transaction
    assert count(cur, "T") == 4


def test_the_statistics_a_writer_counts_are_those_duckdb_counts(cur):
    """MINIMIZE takes a whole tensor's statistics from the writer that wrote it, not from a query."""
    import scipy.sparse

    from trdb.storage import tile_store
    from trdb.storage.tile_writer import TileWriter
    cur.execute("CREATE TENSOR W SHAPE (20, 30) TILE (10, 10)")  # empty: the writer's tiles are all of it
    session = cur.connection._session()
    meta = session.catalog.require_tensor("W")
    sparse = scipy.sparse.csr_matrix(np.diag([1.0, 2.0] + [0.0] * 8))
    tiles = {(0, 0): np.ones((10, 10)), (0, 2): np.zeros((10, 10)), (1, 1): sparse, (1, 2): np.full((10, 10), 5.0)}
    with TileWriter(session.catalog.db, meta, batch_bytes=100) as writer:  # one batch a tile or two
        for key, tile in tiles.items():
            writer.add(key, tile)
    assert writer.statistics.as_tuple() == tile_store.tile_statistics(session.catalog.db, meta)
    assert writer.statistics.as_tuple()[:4] == (4, 100 + 2 + 100, 1, 2)  # the zero tile is stored too; one is CSR


def test_whole_writes_save_the_statistics_a_recount_gives(tmp_path):
    """CREATE TENSOR FROM ? / FILL / AS and an UPDATE of every tile take the statistics their writer counted (no
    query), an UPDATE of some tiles keeps the key counts it had: each saved row equals DuckDB's recount, zero
    tiles, CSR tiles and edge tiles included, also after the file is opened again."""
    import scipy.sparse

    from trdb.storage import tile_store
    path = str(tmp_path / "whole.trdb")
    con = trdb.connect(path)
    dense = np.arange(35, dtype=np.float32).reshape(5, 7)
    dense[:2, :3] = 0  # a zero tile: stored, its non-zeros 0
    con.execute("CREATE TENSOR D FROM ? TILE (2, 3)", [dense])
    con.execute("CREATE TENSOR F SHAPE (6, 4) TILE (4, 4) FILL CONSTANT(3)")
    con.execute("CREATE TENSOR Z SHAPE (30, 30) TILE (20, 20) FILL ZEROS")
    con.execute("CREATE TENSOR S FROM ? TILE (4, 4)", [scipy.sparse.random(8, 12, density=0.05, format="csr",
                                                                               random_state=3)])
    con.execute("CREATE TENSOR A AS SELECT i, j, v * 2 AS v FROM D WHERE i > 0")
    con.execute("UPDATE D SET v = RELU(v - 20)")  # every tile: some become all zeros, still stored
    con.execute("UPDATE F SET v = v * 0")
    session = con._session()
    version = session.catalog.require_tensor("Z").version
    con.execute("UPDATE Z SET v = v + 1 WHERE i = 5")  # no tile: nothing changes, not even the data version
    assert session.catalog.require_tensor("Z").version == version
    sparse = np.zeros((20, 20), dtype=np.float32)
    sparse[1, 0] = 4
    con.execute("UPDATE Z SET v = ? WHERE i = 0 AND j = 0", [sparse])  # some tiles: the keys stay, stored CSR
    con.execute("UPDATE Z SET v = v + 2 WHERE i = 1 AND j = 0")
    assert session.catalog.require_tensor("Z").csr_tuples == 1
    expected = {"D": 9, "F": 2, "Z": 4, "A": 6}
    for name in ("D", "F", "Z", "S", "A"):
        meta = session.catalog.require_tensor(name)
        recount = tile_store.tile_statistics(session.catalog.db, meta)
        assert (meta.tuple_count, meta.nnz, meta.csr_tuples, meta.csr_nnz, meta.distinct_keys) == recount, name
        if name in expected:
            assert meta.tuple_count == expected[name], name
    assert session.catalog.require_tensor("D").nnz == int(np.count_nonzero(np.maximum(dense - 20, 0)))
    assert session.catalog.require_tensor("F").nnz == 0
    assert session.catalog.require_tensor("Z").nnz == 1 + 10 * 20
    con.close()
    reopened = trdb.connect(path)
    assert reopened.execute("SELECT * FROM D").fetch_tensor().tolist() == np.maximum(dense - 20, 0).tolist()
    reopened.close()


def test_written_statistics_count_distinct_keys_by_marks_or_sorts_alike():
    from trdb.storage.tile_store import WrittenStatistics
    rng = np.random.default_rng(4)
    batches = [rng.integers(0, 50, (300, 2)) for _ in range(5)] + [np.array([[60, 3]])]  # 60: past the grid
    for grid in ((50, 50), None):
        statistics = WrittenStatistics(2, grid)
        for keys in batches:
            statistics.add(keys, np.ones(len(keys), np.int64), np.zeros(len(keys), np.int8))
        everything = np.concatenate(batches)
        assert statistics.as_tuple() == (len(everything), len(everything), 0, 0,
                                         tuple(len(np.unique(everything[:, c])) for c in range(2)))


def test_a_cancel_interrupts_only_a_tile_insert_running_now():
    """Database.interrupt_tile_insert (a cancelled statement's) between queries hits nothing: DuckDB forgets it."""
    from trdb.storage.database import Database
    db = Database()
    db.interrupt_tile_insert()
    db.interrupt()  # even DuckDB's own interrupt, between queries
    assert db.execute("SELECT 42") == [(42,)]
    db.close()


def test_a_cancelled_statement_stops_in_its_tile_insert_and_leaves_nothing(monkeypatch):
    """A cancel that lands while DuckDB inserts tiles interrupts the insert: the statement is cancelled, and no
    tensor is left. The insert is stood in for by a query that would run for minutes; the cancel is repeated
    until it has stopped (one that lands between queries is forgotten)."""
    import threading
    import time

    from trdb.storage import database
    con = trdb.connect()
    real = database.Database.append_arrow

    def cancelled_midway(self, table, data):
        done = threading.Event()

        def cancel_until_done():
            while not done.wait(0.05):
                con._session().cancel()
        canceller = threading.Thread(target=cancel_until_done)
        self._inserting_tiles = True  # as inside the real insert
        canceller.start()
        try:
            started = time.perf_counter()
            with self._translated():  # as the real insert: DuckDB's errors become trdb's
                self._con.execute("SELECT count(*) FROM range(1000000000000)").fetchall()
            raise AssertionError(f"not interrupted in {time.perf_counter() - started:.0f} s")
        finally:
            self._inserting_tiles = False
            done.set()
            canceller.join()
    monkeypatch.setattr(database.Database, "append_arrow", cancelled_midway)
    with pytest.raises(trdb.OperationalError, match="cancelled"):
        con.execute("CREATE TENSOR T FROM ? TILE (1024, 1024)", [np.ones((2048, 1024), np.float32)])
    monkeypatch.undo()
    assert con.execute("SHOW TENSORS").fetchall() == []
    assert real is database.Database.append_arrow
    con.close()


def test_a_step_saves_the_statistics_that_changed_and_keeps_the_others(tmp_path):
    """A MINIMIZE step sets the statistics of the tensors whose counts changed (Adam's moments gain non-zeros as
    dead units wake) and only new data versions for the rest: every row then holds its tensor's recount."""
    from trdb.storage import tile_store
    path = str(tmp_path / "steps.trdb")
    con = trdb.connect(path)
    x = np.random.default_rng(1).standard_normal((40, 6)).astype(np.float32)
    x[:, :2] = 0  # inputs that are always zero: their weights' gradients and moments stay exact zeros
    con.execute("CREATE TENSOR X FROM ? TILE (40, 6)", [x])
    con.execute("CREATE TENSOR W FROM ? TILE (6, 5)", [np.random.default_rng(2).standard_normal((6, 5)).astype(np.float32)])
    con.execute("CREATE TENSOR b SHAPE (5) TILE (5) FILL ZEROS")
    con.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(RELU(h.v + b.v) - 1)) AS v FROM (SELECT X.i, W.j, "
                "SUM(MATMUL(X.v, W.v)) AS v FROM X JOIN W ON X.j = W.i GROUP BY X.i, W.j) AS h JOIN b ON b.i = h.j")
    for _ in range(3):
        con.execute("MINIMIZE loss WRT (W, b) WITH (optimizer = 'adam', learning_rate = 0.05, steps = 2)").fetchall()
    con.close()
    reopened = trdb.connect(path)
    session = reopened._session()
    names = ["W", "b", "__trdb_adam_m__W", "__trdb_adam_v__W", "__trdb_adam_m__b", "__trdb_adam_v__b"]
    for name in names:
        meta = session.catalog.require_tensor(name)
        recount = tile_store.tile_statistics(session.catalog.db, meta)
        assert (meta.tuple_count, meta.nnz, meta.csr_tuples, meta.csr_nnz) == tuple(recount[:4]), name
    moment = session.catalog.require_tensor("__trdb_adam_v__W")
    assert 0 < moment.nnz < 30  # the always-zero inputs' rows hold zeros: a count that is not the tile's size
