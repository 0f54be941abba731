"""Connections to one file in one process share one database and lose nothing; other processes read it read-only."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import trdb


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "shared.trdb")


def _total(con, name: str = "W") -> float:
    return float(con.execute(f"SELECT * FROM {name}").fetch_tensor().sum())


def test_the_second_connection_computes_from_the_first_ones_commit(path):
    c1 = trdb.connect(path)
    c1.execute("CREATE TENSOR W SHAPE (4,4) TILE (2,2) FILL ONES")
    c2 = trdb.connect(path)
    c2.execute("SELECT * FROM W").fetchall()  # c2 has W's tiles cached now
    c1.execute("UPDATE W SET v = W.v + 1")
    c2.execute("UPDATE W SET v = W.v * 10")
    c3 = trdb.connect(path)
    assert _total(c3) == 320
    c1.execute("DROP TENSOR W")
    with pytest.raises(trdb.ProgrammingError, match='"W" does not exist'):
        c2.execute("SELECT * FROM W")
    c1.execute("CREATE TENSOR N SHAPE (2,2) TILE (2,2) FILL ONES")
    with pytest.raises(trdb.IntegrityError, match='"N" already exists'):
        c2.execute("CREATE TENSOR N SHAPE (2,2) TILE (2,2) FILL ZEROS")
    for con in (c1, c2, c3):
        con.close()
    with trdb.connect(path) as con:
        assert _total(con, "N") == 4


def test_connections_share_the_buffer_pool_and_keep_their_own_settings(path):
    c1, c2 = trdb.connect(path, workers=1), trdb.connect(path, workers=2)
    assert c1._live.pool is c2._live.pool
    assert [c.execute("SHOW workers").fetchone()[0] for c in (c1, c2)] == ["1", "2"]
    c1.close()
    c2.execute("CREATE TENSOR A SHAPE (2,2) TILE (2,2) FILL ONES")  # still open after the other closed
    c2.close()
    with trdb.connect(path) as again:
        assert _total(again, "A") == 4


def test_a_transaction_sees_its_snapshot_and_the_other_connection_sees_only_commits(path):
    c1, c2 = trdb.connect(path), trdb.connect(path)
    c1.execute("CREATE TENSOR W SHAPE (4,4) TILE (2,2) FILL ONES")
    c1.execute("BEGIN")
    c1.execute("UPDATE W SET v = W.v + 1")
    assert _total(c1) == 32 and _total(c2) == 16  # not committed yet
    c2.execute("BEGIN")
    assert _total(c2) == 16
    c1.execute("COMMIT")
    assert _total(c2) == 16  # c2's transaction keeps its snapshot
    c2.execute("COMMIT")
    assert _total(c2) == 32


def test_two_transactions_writing_one_tensor_the_later_is_a_conflict_that_changes_nothing(path):
    c1, c2 = trdb.connect(path), trdb.connect(path)
    c1.execute("CREATE TENSOR W SHAPE (4,4) TILE (2,2) FILL ONES")
    c1.execute("BEGIN")
    c2.execute("BEGIN")
    c1.execute("UPDATE W SET v = W.v + 1")
    with pytest.raises(trdb.OperationalError, match="another connection changed the same data") as error:
        c2.execute("UPDATE W SET v = W.v * 10")
        c2.execute("COMMIT")
    assert isinstance(error.value, trdb.errors.TransactionConflict)
    c2.rollback()
    c1.execute("COMMIT")
    assert _total(c2) == 32 and _total(trdb.connect(path)) == 32


def test_two_creates_of_one_name_in_transactions_the_first_commit_wins(path):
    c1, c2 = trdb.connect(path), trdb.connect(path)
    c1.execute("BEGIN")
    c2.execute("BEGIN")
    c1.execute("CREATE TENSOR N SHAPE (2,2) TILE (2,2) FILL ONES")
    c2.execute("CREATE TENSOR N SHAPE (2,2) TILE (2,2) FILL CONSTANT(2)")
    c2.execute("COMMIT")
    with pytest.raises(trdb.errors.TransactionConflict, match="another connection changed the same data"):
        c1.execute("COMMIT")
    assert _total(c1, "N") == 8 and _total(c2, "N") == 8  # c2's, whole
    assert [r[0] for r in c1.execute("SHOW TENSORS").fetchall()] == ["N"]


def test_threads_updating_one_tensor_end_in_a_serial_order(path):
    """Two connections, each in its own thread: increments of 1 and of 1000 to W (in autocommit and
    in transactions), and creates and drops of tensors of their own. The final W is what some serial
    order of the committed statements gives; every refused statement was a clear conflict."""
    setup = trdb.connect(path)
    setup.execute("CREATE TENSOR W SHAPE (4,4) TILE (2,2) FILL CONSTANT(0.5)")
    committed = {1: 0, 1000: 0}
    conflicts: list[BaseException] = []
    unexpected: list[BaseException] = []

    def work(step: int, rounds: int) -> None:
        con = trdb.connect(path)
        try:
            for n in range(rounds):
                try:
                    if n % 3 == 2:
                        con.execute("BEGIN")
                        con.execute(f"UPDATE W SET v = W.v + {step}")
                        con.execute("COMMIT")
                    else:
                        con.execute(f"UPDATE W SET v = W.v + {step}")
                    committed[step] += 1
                except trdb.errors.TransactionConflict as exc:
                    conflicts.append(exc)
                    con.rollback()
                name = f"T{step}_{n}"
                con.execute(f"CREATE TENSOR {name} SHAPE (2,2) TILE (2,2) FILL ONES")
                assert _total(con, name) == 4
                con.execute(f"DROP TENSOR {name}")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            unexpected.append(exc)
        finally:
            con.close()

    threads = [threading.Thread(target=work, args=(step, 30)) for step in (1, 1000)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not unexpected, unexpected
    expected = 0.5 + committed[1] + 1000 * committed[1000]
    final = setup.execute("SELECT * FROM W").fetch_tensor()
    np.testing.assert_array_equal(final, np.full((4, 4), expected, np.float32))
    assert committed[1] + committed[1000] + len(conflicts) == 60
    assert all("another connection changed the same data" in str(c) for c in conflicts)
    assert [r[0] for r in setup.execute("SHOW TENSORS").fetchall()] == ["W"]
    setup.close()


def _in_another_process(path: str, code: str) -> subprocess.CompletedProcess:
    script = "import sys, trdb\npath = sys.argv[1]\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True, timeout=120)


READER = """
try:
    con = trdb.connect(path, read_only=True)
except trdb.OperationalError as exc:
    print("refused:", exc)
else:
    print("sum:", con.execute("SELECT * FROM W").fetch_tensor().sum())
    try:
        con.execute("UPDATE W SET v = W.v + 1")
    except trdb.Error as exc:
        print("write refused:", type(exc).__name__)
    print("sum:", con.execute("SELECT * FROM W").fetch_tensor().sum())
"""


def test_a_read_only_process_reads_while_no_writer_holds_the_file(path):
    with trdb.connect(path) as con:
        con.execute("CREATE TENSOR W SHAPE (4,4) TILE (2,2) FILL ONES")
        done = _in_another_process(path, READER)  # this process holds the file for writing
        assert "refused:" in done.stdout and "lock" in done.stdout.lower(), done.stdout + done.stderr
        assert "read_only" in done.stdout or "close it" in done.stdout
    done = _in_another_process(path, READER)
    assert done.stdout.splitlines() == ["sum: 16.0", "write refused: OperationalError", "sum: 16.0"], \
        done.stdout + done.stderr
    with trdb.connect(path, read_only=True) as reader:  # two readers at once
        other = _in_another_process(path, READER)
        assert other.stdout.startswith("sum: 16.0"), other.stdout + other.stderr
        assert _total(reader) == 16


def test_one_file_is_open_in_one_mode_per_process(path):
    with trdb.connect(path) as con:
        con.execute("CREATE TENSOR W SHAPE (2,2) TILE (2,2) FILL ONES")
        with pytest.raises(trdb.OperationalError, match="already open read-write in this process"):
            trdb.connect(path, read_only=True)


def test_a_long_minimize_in_one_connection_does_not_block_reads_in_another(path):
    trainer = trdb.connect(path)
    script = (Path(__file__).parent.parent.parent / "queries" / "linear_regression.sql").read_text()
    trainer.execute(script.split("\nMINIMIZE")[0])  # the tensors and views, not the training
    reader = trdb.connect(path)
    start = reader.execute("SELECT * FROM W").fetch_tensor()
    training = trainer.cursor()
    outcome: dict = {}

    def train() -> None:
        try:
            training.execute("MINIMIZE loss WRT (W) WITH (optimizer = 'sgd', learning_rate = 0.1, steps = 100000)")
        except trdb.Error as exc:
            outcome["error"] = exc
    trainer_thread = threading.Thread(target=train)
    trainer_thread.start()
    seen: list[np.ndarray] = []

    def read() -> None:  # while the training runs: W changes step by step, X never
        while len(seen) < 5:
            current = reader.execute("SELECT * FROM W").fetch_tensor()
            if not seen or not np.array_equal(current, seen[-1]):
                seen.append(current)
            assert reader.execute("SELECT COUNT(*) FROM X").fetchone() == (4,)
    reader_thread = threading.Thread(target=read)
    reader_thread.start()
    reader_thread.join(120)
    assert not reader_thread.is_alive(), "reads waited for the training"
    assert trainer_thread.is_alive()  # the reads saw 4 committed steps while training went on
    training.close()  # cancels the MINIMIZE; its committed steps stay
    trainer_thread.join(60)
    assert isinstance(outcome.get("error"), trdb.errors.QueryCancelled)
    assert not np.array_equal(seen[-1], start) and len(seen) == 5
    trainer.close()
    reader.close()


def test_a_read_that_meets_another_commit_runs_again_and_sees_one_state(path, monkeypatch):
    from trdb.storage import tile_store
    writer, reader = trdb.connect(path), trdb.connect(path)
    writer.execute("CREATE TENSOR A SHAPE (4,4) TILE (2,2) FILL ONES")
    writer.execute("CREATE TENSOR B SHAPE (4,4) TILE (2,2)")  # no FILL: every tile absent, for INSERT to fill
    reader.execute("SELECT * FROM A").fetchall()  # A's tiles are cached, B's are not
    original, commits = tile_store.read_stacks, []

    def read_stacks(db, meta, *args, **kwargs):
        if meta.name == "B" and not commits:  # another connection commits while the reader reads B
            writer.execute("BEGIN")
            writer.execute("UPDATE A SET v = A.v + 1")
            writer.execute("INSERT INTO B VALUES (0, 0, ?)", [np.ones((2, 2), np.float32)])
            writer.execute("COMMIT")
            commits.append(1)
        return original(db, meta, *args, **kwargs)
    monkeypatch.setattr(tile_store, "read_stacks", read_stacks)  # a whole tensor's read
    summed = reader.execute("SELECT A.i, A.j, A.v + B.v AS v FROM A LEFT JOIN B ON A.i = B.i AND A.j = B.j")
    after = np.full((4, 4), 2.0)
    after[:2, :2] = 3  # a mix of the old A and the new B would be 1 and 2
    np.testing.assert_array_equal(summed.fetch_tensor(), after)
    assert commits == [1]


def test_a_scan_planned_before_a_write_caches_nothing_another_connection_reads_as_committed(path):
    """MINIMIZE's steps run plans made at the statement's start, whose tensor metadata names the version
    before the step's writes. What such a scan reads (this transaction's tiles) is kept under the version
    the connection sees now, never under the older one, which other connections may read (a dirty read)."""
    c1, c2 = trdb.connect(path), trdb.connect(path)
    c1.execute("CREATE TENSOR W SHAPE (4,4) TILE (2,2) FILL ONES")
    planned = c1._session().catalog.require_tensor("W")
    c1.execute("BEGIN")
    c1.execute("UPDATE W SET v = W.v + 1")
    keys, tiles = c1._session().catalog.tiles(planned)  # a scan with the metadata of before the write
    assert sum(float(t.sum()) for t in tiles) == 32
    assert _total(c2) == 16  # not c1's uncommitted tiles
    c1.execute("ROLLBACK")
    assert _total(c1) == 16 and _total(c2) == 16


def test_a_connection_the_collector_frees_while_another_opens_a_file_does_not_deadlock(tmp_path):
    """Any allocation may run the garbage collector, and a connection it frees closes itself: inside
    DatabaseFile.open, under the lock of open files, that close takes the same lock (it hung a test run)."""
    script = """
import gc, sys, trdb
from trdb.storage import database_file
first = trdb.connect(sys.argv[1])
first.cycle = first  # only the collector frees it
del first
original = database_file.DatabaseFile.__init__
def collecting(self, *args):
    gc.collect()  # frees the first connection here, inside open's lock
    original(self, *args)
database_file.DatabaseFile.__init__ = collecting
second = trdb.connect(sys.argv[2])
second.execute("CREATE TENSOR t SHAPE (2) TILE (2) FILL ONES")
print(second.execute("SELECT * FROM t").fetch_tensor().sum())
"""
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "a.trdb"), str(tmp_path / "b.trdb")],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "2.0", done.stderr


def test_a_connection_the_collector_frees_while_its_file_s_memory_lock_is_held_closes_after(tmp_path):
    """A collection inside trdb's memory accounting (its lock held) frees a connection to the same file that
    carries a statement's tuples: their memory goes back under that lock, so the connection is closed after the
    collection (here by the next connect), not inside it (which hung)."""
    script = """
import gc, sys, trdb
first = trdb.connect(sys.argv[1])
first.execute("CREATE TENSOR t SHAPE (64, 64) TILE (8, 8) FILL ONES")
first.execute("CREATE VIEW s AS SELECT SUM(SUMSQ(t.v)) AS v FROM t")
first.execute("SELECT a.v + b.v AS v FROM s AS a, s AS b").fetchall()
assert first._live.carried.tuples  # kept for the next statement, their memory reserved
file = first._live.db.file
first.cycle = first  # only the collector frees it
del first
second = trdb.connect(sys.argv[1])
with file.memory._lock:  # as a statement's accounting holds it, when an allocation starts a collection
    gc.collect()
trdb.connect(sys.argv[1]).close()  # closes the first one, which waited for it
print(file._connections, second.execute("SELECT * FROM t").fetch_tensor().sum())
"""
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "a.trdb")],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "1 4096.0", done.stderr
