"""The memory manager, spill files and the database-wide memory settings."""
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse

import trdb
from helpers.device_standin import DeviceStandIn
from trdb.storage.memory import MemoryManager, duckdb_bytes
from trdb.storage.spill import SpillDirectory, make_folder


def test_reservations_share_one_budget_and_the_minimum_is_always_granted():
    manager = MemoryManager(256 << 20)
    budget = manager.budget
    assert budget == (256 << 20) - duckdb_bytes(256 << 20)
    first, second = manager.reservation("a"), manager.reservation("b", minimum=1 << 20)
    assert first.try_grow(budget - 100)
    assert not first.try_grow(200)
    assert second.try_grow(1 << 20)  # its minimum, past the budget
    assert not second.try_grow(1)
    first.release_all()
    assert second.try_grow(1000) and manager.reserved == (1 << 20) + 1000
    second.release_all()
    assert manager.reserved == 0 and first.peak == budget - 100


def test_a_refused_request_first_shrinks_the_caches():
    manager = MemoryManager(256 << 20)
    cache = manager.reservation("cache")
    assert cache.try_grow(manager.budget)

    def shrink(wanted):
        freed = min(wanted, cache.held)
        cache.shrink(freed)
        return freed
    manager.add_shrinker(shrink)
    assert manager.reservation("operator").try_grow(10 << 20)
    assert cache.held == manager.budget - (10 << 20)


def test_spill_files_hold_tiles_keys_and_scalars_as_written(tmp_path):
    directory = SpillDirectory(str(tmp_path / "spill"))
    rows = [(k, None if k % 2 else k * 3, np.arange(6, dtype=np.float32).reshape(2, 3) + k,
             scipy.sparse.csr_array(np.eye(4) * k), np.float64(k / 2), 1.5, True) for k in range(300)]
    spill = directory.new_file("test")
    spill.write(rows[:100])
    spill.write(rows[100:])
    back = [row for batch in spill.batches(batch_bytes=1000) for row in batch]
    assert len(back) == 300
    for row, again in zip(rows, back):
        assert row[:2] == again[:2] and row[5:] == again[5:]
        assert again[2].dtype == np.float32 and np.array_equal(row[2], again[2])
        assert np.array_equal(row[3].toarray(), again[3].toarray())
        assert type(again[4]) is np.float64 and again[4] == row[4]
    spill.remove()
    directory.close()
    assert not os.path.exists(tmp_path / "spill")


def test_leftover_spill_directories_of_ended_processes_are_removed(tmp_path):
    root = tmp_path / "spill"
    child = subprocess.run([sys.executable, "-c", f"""
from trdb.storage.spill import SpillDirectory, make_folder
f = SpillDirectory({str(root)!r}).new_file("x"); f.write([(1, 2)]); f.finish()
import os; os._exit(0)  # no clean-up: as after kill -9
"""], check=True)
    assert child.returncode == 0 and len(os.listdir(root)) == 1
    SpillDirectory(str(root)).remove_leftovers()
    assert os.listdir(root) == []


def test_memory_limit_and_temp_directory_are_database_wide(tmp_path):
    path = str(tmp_path / "db.trdb")
    first = trdb.connect(path)
    second = trdb.connect(path)
    first.execute("SET memory_limit = '300MB'")
    first.execute(f"SET temp_directory = '{tmp_path / 'spill'}'")
    assert second.execute("SHOW memory_limit").fetchone()[0] == first.execute("SHOW memory_limit").fetchone()[0]
    assert second.execute("SHOW temp_directory").fetchone()[0] == str(tmp_path / "spill")
    second.execute("SET workers = 1")  # a connection's own setting
    assert first.execute("SHOW workers").fetchone()[0] != 1 or os.cpu_count() == 1
    assert first._session().db.file.memory.limit == 300 << 20
    first.close()
    second.close()


@pytest.mark.parametrize("value", ["0", "-1MB", "lots"])
def test_a_bad_memory_limit_is_refused(value):
    with trdb.connect() as con, pytest.raises(trdb.ProgrammingError):
        con.execute(f"SET memory_limit = '{value}'")


def test_duckdb_spills_into_the_default_temp_directory_of_a_file_database(tmp_path):
    path = str(tmp_path / "db.trdb")
    with trdb.connect(path) as con:
        con.execute("SET memory_limit = '16MB'")
        con.execute("CREATE TENSOR A SHAPE (2048, 2048) TILE (256, 256) FILL ONES")
        assert con.execute("SELECT SUM(REDUCE_SUM(A.v)) FROM A").fetchone()[0] == 2048 * 2048
    assert not os.path.exists(path + ".tmp")  # removed with the database's last connection


def test_temp_directory_can_change_after_duckdb_has_spilled(tmp_path):
    path = str(tmp_path / "db.trdb")
    with trdb.connect(path) as con:
        con.execute("SET memory_limit = '16MB'")
        con.execute("CREATE TENSOR A SHAPE (2048, 2048) TILE (256, 256) FILL ONES")
        con.execute("SET memory_limit = '64MB'")  # DuckDB's folder is set again only when it changes
        con.execute(f"SET temp_directory = '{tmp_path / 'elsewhere'}'")  # DuckDB keeps its own: no error
        con.execute("SET memory_limit = '16KB'")
        assert con.execute("SELECT A.i, SUM(REDUCE_SUM(A.v)) AS v FROM A GROUP BY A.i").fetchall()


def test_a_statement_on_a_device_reserves_from_the_devices_budget_and_spills_past_it(tmp_path, monkeypatch):
    monkeypatch.setattr("trdb.session.session.backend_for", lambda device: DeviceStandIn())
    with trdb.connect(str(tmp_path / "db.trdb")) as con:
        # two scan batches of 64 tiles: the groups by j are complete (16 tiles) only in the second
        con.execute("CREATE TENSOR A SHAPE (1024, 512) TILE (64, 64) FILL RANDOM_UNIFORM(0, 1, 3)")
        con.execute("SET workers = 1")
        con.execute("SET gpu_memory_limit = '64KB'")  # room for four of the eight 16 KB sums
        file = con._session().db.file
        host_peak = file.memory.peak
        got = con.execute("SELECT A.j, SUM(A.v) FROM A GROUP BY A.j ORDER BY A.j").fetchall()
        assert file.device_memory is not None and file.device_memory.limit == 64 << 10
        assert file.device_memory.peak > 0 and file.memory.peak == host_peak
        dense = con.execute("SELECT * FROM A").fetch_tensor()
        assert all(np.allclose(tile, dense[:, 64 * j:64 * j + 64].reshape(16, 64, 64).sum(axis=0))
                   for j, tile in got)
        plan = "\n".join(r[0] for r in con.execute(
            "EXPLAIN ANALYZE SELECT A.j, SUM(A.v) FROM A GROUP BY A.j ORDER BY A.j").fetchall())
        assert "spilled=" in plan
        con.execute("SET gpu_memory_limit = 0")
        con.execute("SELECT SUM(SUMSQ(A.v)) FROM A").fetchall()
        assert file.device_memory.limit == int(0.8 * (1 << 30))


def test_duckdbs_temp_folder_is_one_per_database_and_a_dead_processs_is_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    leftover = tmp_path / "spill" / f"trdb-{int(dead.stdout)}-duckdb"
    leftover.mkdir(parents=True)
    (leftover / "duckdb_temp_storage-0.tmp").write_bytes(b"x")
    with trdb.connect(str(tmp_path / "db.trdb"), temp_directory=str(tmp_path / "spill")) as con:
        folder = con._session().db.file.spill.duckdb_folder
        assert os.path.basename(folder).startswith(f"trdb-{os.getpid()}-duckdb-") and os.path.isdir(folder)
        assert not leftover.exists()
        with trdb.connect(temp_directory=str(tmp_path / "spill")) as other:  # another database of this process
            assert other._session().db.file.spill.duckdb_folder != folder


def test_closing_one_in_memory_database_keeps_the_blocks_another_spilled(tmp_path):
    """A fuzz finding: DuckDB's temp folder was one per process, and whichever database closed first removed it,
    with the blocks an in-memory database had evicted there: that database's committed tensor was lost."""
    data = np.random.default_rng(0).standard_normal((4096, 8192)).astype(np.float32)  # 128 MiB: past 96MB
    spill = str(tmp_path / "spill")
    with trdb.connect(memory_limit="96MB", temp_directory=spill) as kept:
        kept.execute("CREATE TENSOR T FROM ? TILE (512, 512)", [data])
        for _ in range(2):
            with trdb.connect(memory_limit="96MB", temp_directory=spill) as other:
                other.execute("CREATE TENSOR U SHAPE (2, 2) TILE (2, 2) FILL ONES")
        total = kept.execute("SELECT SUM(REDUCE_SUM(T.v)) AS v FROM T").fetchone()[0]
        np.testing.assert_allclose(float(total), data.astype(np.float64).sum(), rtol=1e-3, atol=1.0)


def test_a_folder_another_process_removed_meanwhile_is_made_again(tmp_path, monkeypatch):
    real, calls = os.makedirs, []

    def racing(path, mode=0o777, exist_ok=False):
        calls.append(path)
        if len(calls) == 1:  # the parent vanished between making it and making the child
            raise FileNotFoundError(2, "No such file or directory")
        real(path, mode, exist_ok)
    monkeypatch.setattr(os, "makedirs", racing)
    make_folder(str(tmp_path / "a" / "b"))
    assert (tmp_path / "a" / "b").is_dir() and calls.count(str(tmp_path / "a" / "b")) == 2


def test_a_new_temp_directory_keeps_the_blocks_duckdb_spilled_to_the_old_one(tmp_path):
    """A fuzz finding that lost data: SET temp_directory removed DuckDB's folder under the old directory, but DuckDB
    keeps spilling there until the database closes; an in-memory database's evicted blocks went with it."""
    data = np.random.default_rng(1).standard_normal((4096, 8192)).astype(np.float32)  # 128 MiB: past 96MB
    with trdb.connect(memory_limit="96MB", temp_directory=str(tmp_path / "first")) as con:
        con.execute("CREATE TENSOR T FROM ? TILE (512, 512)", [data])
        con.execute(f"SET temp_directory = '{tmp_path / 'second'}'")
        total = con.execute("SELECT SUM(REDUCE_SUM(T.v)) AS v FROM T").fetchone()[0]
        np.testing.assert_allclose(float(total), data.astype(np.float64).sum(), rtol=1e-3, atol=1.0)
    assert not any((tmp_path / "first").glob("trdb-*-duckdb-*"))  # removed once the database closed


def _duckdb_megabytes(cur) -> float:
    return cur.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchone()[0] / (1 << 20)


@pytest.mark.parametrize("checkpoints", [True, False])
def test_a_database_in_memory_frees_the_tiles_steps_wrote_over(monkeypatch, checkpoints):
    """DuckDB keeps the rows an UPDATE replaced until a checkpoint, which a database in memory never makes by
    itself: 200 Adam steps write over 3 tiles of 92 KB each (55 MB). trdb checkpoints it once that much is
    obsolete (here 4 MB); without that (the threshold out of reach) DuckDB's memory grows by all of it."""
    from trdb.storage import database_file
    monkeypatch.setattr(database_file, "GARBAGE_CHECKPOINT_BYTES", 4 << 20 if checkpoints else 1 << 40)
    with trdb.connect() as con:
        cur = con.cursor()
        cur.execute("CREATE TENSOR W SHAPE (1433, 16) TILE (1433, 16) FILL RANDOM_NORMAL(0, 1, 1)")
        cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(W.v)) AS v FROM W")
        before = _duckdb_megabytes(cur)
        losses = cur.execute("MINIMIZE loss WRT (W) WITH (optimizer = 'adam', learning_rate = 0.01, steps = 200)")
        first, last = losses.fetchall()[0][1], cur.execute("SELECT * FROM loss").fetchone()[0]
        grown = _duckdb_megabytes(cur) - before
        W = cur.execute("SELECT * FROM W").fetch_tensor().astype(np.float64)
    assert last < first and last == pytest.approx((W ** 2).sum(), rel=1e-5)
    assert grown < 16 if checkpoints else grown > 40


def test_a_checkpoint_duckdb_cannot_make_now_waits_and_a_ctrl_c_in_it_cancels(monkeypatch):
    from trdb import errors
    from trdb.storage import database_file
    from trdb.storage.database import Database
    monkeypatch.setattr(database_file, "GARBAGE_CHECKPOINT_BYTES", 1)
    db = Database(None)
    try:
        real, failure = Database.execute, []

        def execute(self, sql, params=()):
            if sql == "CHECKPOINT" and failure:
                raise failure[0]
            return real(self, sql, params)
        monkeypatch.setattr(Database, "execute", execute)
        db.file.note_garbage(10)
        failure.append(errors.OperationalError("Cannot CHECKPOINT: there are other transactions"))
        db.begin()  # the transaction begins all the same; the garbage waits for the next one
        db.rollback()
        assert db.file.garbage_bytes == 10
        failure[0] = errors.QueryCancelled("INTERRUPT Error: Interrupted!")
        with pytest.raises(errors.QueryCancelled):
            db.begin()
        assert not db.in_transaction and db.file.garbage_bytes == 10
        failure.clear()
        db.begin()
        db.rollback()
        assert db.file.garbage_bytes == 0
    finally:
        db.close()


def test_duckdb_runs_without_worker_threads_whatever_the_memory_limit(tmp_path):
    """DuckDB's idle workers call malloc_trim, which would hand the tile memory trdb keeps back to the OS."""
    for path in (str(tmp_path / "db.trdb"), None):
        con = trdb.connect(path)
        assert con.execute("SELECT current_setting('threads')").fetchone()[0] == 1
        con.execute("SET memory_limit = '3GB'")
        assert con.execute("SELECT current_setting('threads')").fetchone()[0] == 1
        con.close()

