"""A result streamed in Arrow batches (Database.arrow_batches) and read slowly blocks no other connection."""
from __future__ import annotations

import threading

from trdb.storage.database import Database

ROWS = 10_000
WAIT = 60  # seconds: only a guard against a deadlock (the steps below wait on events, not on time)


def _stream_slowly(db: Database, first: threading.Event, resume: threading.Event, got: list) -> None:
    """Read the first batch, say so, wait until told, then read the rest."""
    batches = db.arrow_batches("SELECT x FROM _stream_source", 1000)
    got.append(next(batches).num_rows)
    first.set()
    if resume.wait(WAIT):
        got.extend(batch.num_rows for batch in batches)
    batches.close()


def test_another_connection_runs_statements_while_a_result_is_half_read(tmp_path):
    path = str(tmp_path / "db.trdb")
    reader, other = Database(path), Database(path)
    try:
        reader.execute(f"CREATE TEMP TABLE _stream_source AS SELECT range AS x FROM range({ROWS})")
        reader.begin()
        first, resume, got = threading.Event(), threading.Event(), []
        streaming = threading.Thread(target=_stream_slowly, args=(reader, first, resume, got), daemon=True)
        streaming.start()
        assert first.wait(WAIT)
        done = threading.Event()

        def statements() -> None:  # a write and a commit of its own, and a read, while the stream is open
            other.execute("CREATE TABLE written AS SELECT range AS y FROM range(100)")
            other.execute("INSERT INTO written VALUES (100)")
            done.set()

        writer = threading.Thread(target=statements, daemon=True)
        writer.start()
        assert done.wait(WAIT), "the other connection's statement waited for the open result"
        assert other.execute("SELECT count(*) FROM written") == [(101,)]
        resume.set()
        streaming.join(WAIT)
        writer.join(WAIT)
        assert sum(got) == ROWS and not streaming.is_alive()  # the stream went on, whole, after it
        reader.rollback()
    finally:
        reader.close()
        other.close()


def test_the_connection_is_free_again_once_the_stream_is_closed_early(tmp_path):
    db = Database(str(tmp_path / "db.trdb"))
    try:
        batches = db.arrow_batches("SELECT range AS x FROM range(5000)", 100)
        assert next(batches).num_rows == 100
        batches.close()
        done = threading.Event()
        worker = threading.Thread(target=lambda: (db.execute("SELECT 1"), done.set()), daemon=True)
        worker.start()
        assert done.wait(WAIT), "a closed stream kept the connection's lock"
        worker.join(WAIT)
    finally:
        db.close()
