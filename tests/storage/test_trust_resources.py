"""Resources a statement may not exhaust: statement text bounded by memory_limit, a full disk or an unwritable
temp directory that leaves the connection usable, and DuckDB's share of the budget large enough for its tiles.

Each test that could allocate without bound runs in a child process under RLIMIT_AS (its address space when
the test starts, plus a cap): a statement that needs more fails there with a trdb error, never a MemoryError.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import trdb

pytestmark = pytest.mark.on_cpu  # the children run under RLIMIT_AS, where CUDA cannot start

# The child: its address space after a warm-up statement plus CAP is all it may take; it prints one JSON line.
CHILD = """
import json, resource, sys
import trdb

def address_space():
    return next(int(l.split()[1]) << 10 for l in open("/proc/self/status") if l.startswith("VmSize:"))

con = trdb.connect(*sys.argv[2:3])
cur = con.cursor()
cur.execute("SELECT length('warm-up')").fetchall()
cap = address_space() + int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
report = {{}}
try:
{body}
except trdb.Error as exc:
    report["error"] = [type(exc).__name__, str(exc)]
except BaseException as exc:
    report["raw"] = [type(exc).__name__, str(exc)[:400]]
print(json.dumps(report))
"""


def run_child(body: str, cap: int, *args: str) -> dict:
    """Run `body` (statements on `cur`, filling `report`) in a child capped at `cap` bytes above its start."""
    script = CHILD.format(body=textwrap.indent(textwrap.dedent(body), " " * 4))
    env = dict(os.environ, MALLOC_ARENA_MAX="2", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", script, str(cap), *args], capture_output=True, text=True,
                          timeout=600, env=env)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"child failed ({done.returncode}): {done.stderr[-3000:]}"
    return json.loads(lines[-1])


# ------------------------------------------------------------------ statement text

def test_a_5mb_string_literal_runs_in_bounded_memory():
    """Lexing a literal once cost ~300 bytes a character (a regex loop's state): 5 MB peaked at ~1.6 GB."""
    report = run_child("""
        n = 5_000_000
        report["plain"] = cur.execute("SELECT length('" + "x" * n + "')").fetchall()[0][0]
        report["quotes"] = cur.execute("SELECT length('" + "ab''" * (n // 4) + "')").fetchall()[0][0]
    """, 1 << 30)
    assert report == {"plain": 5_000_000, "quotes": 3 * 5_000_000 // 4}


def test_a_5mb_literal_in_trql_and_a_comment_run_in_bounded_memory():
    report = run_child("""
        n = 5_000_000
        cur.execute("CREATE TENSOR A (i) SHAPE (4) TILE (4) FILL ONES")
        report["trql"] = cur.execute("SELECT COUNT(*) FROM A WHERE '" + "y" * n + "' <> ''").fetchall()[0][0]
        report["comment"] = cur.execute("SELECT 1 /* " + "z" * n + " */").fetchall()[0][0]
    """, 1 << 30)
    assert report == {"trql": 1, "comment": 1}


def test_a_50mb_literal_works_or_is_refused_with_a_trdb_error():
    """50 MB raised a raw MemoryError; now it runs (within the cap) or fails as a trdb error."""
    report = run_child("""
        report["rows"] = cur.execute("SELECT length('" + "x" * 50_000_000 + "')").fetchall()[0][0]
    """, 1 << 30)
    assert "raw" not in report, report
    assert report.get("rows") == 50_000_000 or report["error"][0] == "OperationalError", report


def test_statement_text_is_bounded_by_memory_limit():
    """What a statement's text costs to parse is refused up front when memory_limit cannot hold it."""
    report = run_child("""
        cur.execute("SET memory_limit = '64MB'")
        try:
            cur.execute("INSERT INTO t VALUES " + ",".join(["(1)"] * 2_000_000))
        except trdb.OperationalError as exc:
            report["values"] = str(exc)
        try:
            cur.execute("SELECT length('" + "x" * 20_000_000 + "')")
        except trdb.OperationalError as exc:
            report["literal"] = str(exc)
        report["after"] = cur.execute("SELECT length('" + "x" * 100_000 + "')").fetchall()[0][0]
        # a script is bounded statement by statement: 100 KB of short statements is no long statement
        report["script"] = cur.execute(";".join(["SELECT 1"] * 12_000)).fetchall()[0][0]
    """, 1 << 30)
    assert "raw" not in report and "error" not in report, report
    for key in ("values", "literal"):
        assert "memory_limit" in report[key] and "statement text" in report[key], report[key]
    assert report["after"] == 100_000 and report["script"] == 1


def test_long_statement_texts_are_not_kept_by_caches():
    """Caches keyed by statement text (split, parse, plain-SQL check, replacement scans) keep no long text:
    200 different 1 MB statements would hold 200 MB in each cache that kept them."""
    report = run_child("""
        for k in range(200):
            cur.execute("SELECT length('" + str(k) + "x" * 1_000_000 + "')").fetchall()
        report["done"] = k
    """, 384 << 20)
    assert report == {"done": 199}


# ------------------------------------------------------------------ a full disk, a temp directory gone

def _checkpoint_after_temp_directory_removed(tmp_path):
    """A file database whose DuckDB spilled blocks to temp_directory, which is then removed: the next
    checkpoint fails, and DuckDB invalidates the database (every later call: "database has been invalidated")."""
    con = trdb.connect(str(tmp_path / "db.trdb"))
    cur = con.cursor()
    temp = tmp_path / "temp"
    cur.execute("SET memory_limit = '64MB'")
    cur.execute(f"SET temp_directory = '{temp}'")
    cur.execute("CREATE TENSOR A SHAPE (64, 64) TILE (64, 64) FILL RANDOM_NORMAL(0, 1, 1)")
    cur.execute("CREATE TENSOR B SHAPE (2048, 2048) TILE (256, 256) FILL RANDOM_NORMAL(0, 1, 2)")
    expected = cur.execute("SELECT SUM(SUMSQ(A.v)) FROM A").fetchone()[0]
    shutil.rmtree(temp)
    return con, cur, expected


def test_a_removed_temp_directory_leaves_the_connection_usable(tmp_path):
    con, cur, expected = _checkpoint_after_temp_directory_removed(tmp_path)
    failures = []
    for statement in ("CREATE TENSOR C SHAPE (2048, 2048) TILE (256, 256) FILL RANDOM_NORMAL(0, 1, 3)",
                      "SELECT SUM(SUMSQ(A.v)) FROM A", "CHECKPOINT"):
        try:
            cur.execute(statement)
        except trdb.Error as exc:
            failures.append(exc)
    assert all(isinstance(f, trdb.OperationalError) for f in failures), [repr(f) for f in failures]
    assert all("temp" in str(f).lower() and "HINT" in str(f) for f in failures), [str(f) for f in failures]
    # whatever failed, the connection goes on: committed data is there, and new statements run
    assert cur.execute("SELECT SUM(SUMSQ(A.v)) FROM A").fetchone()[0] == expected
    cur.execute("CREATE TENSOR Z SHAPE (4) TILE (4) FILL ONES")
    assert cur.execute("SELECT SUM(SUMSQ(Z.v)) FROM Z").fetchone()[0] == 4
    assert {r[0] for r in cur.execute("SHOW TENSORS").fetchall()} >= {"A", "B", "Z"}
    con.close()


def test_every_connection_goes_on_after_the_database_is_reopened(tmp_path):
    """What trdb does when DuckDB invalidates a file database (above): it opens the file again. Every other
    connection renews its DuckDB connection; one inside a transaction is told that the transaction was lost."""
    path = str(tmp_path / "db.trdb")
    con, idle, busy = trdb.connect(path), trdb.connect(path), trdb.connect(path)
    con.execute("CREATE TENSOR A SHAPE (4) TILE (2) FILL ONES")
    busy.execute("BEGIN")
    busy.execute("CREATE TENSOR B SHAPE (4) TILE (2) FILL ONES")
    database = con._session().db
    database.file.reopen(database.file.incarnation)  # as after DuckDB's "database has been invalidated"
    con.execute("CREATE TENSOR C SHAPE (4) TILE (2) FILL ONES")
    assert idle.execute("SELECT SUM(SUMSQ(A.v)) FROM A").fetchone()[0] == 4
    with pytest.raises(trdb.OperationalError, match="transaction was lost"):
        busy.execute("SELECT SUM(SUMSQ(B.v)) FROM B").fetchall()
    busy.execute("ROLLBACK")
    assert {r[0] for r in busy.execute("SHOW TENSORS").fetchall()} == {"A", "C"}
    for c in (con, idle, busy):
        c.close()


@pytest.fixture
def tiny_disk(tmp_path):
    """A 2 MB file system (tmpfs; the test is skipped where it cannot be mounted)."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def test_a_full_disk_leaves_the_connection_usable(tiny_disk):
    con = trdb.connect(str(tiny_disk / "db.trdb"))
    cur = con.cursor()
    cur.execute("CREATE TENSOR A SHAPE (64, 64) TILE (64, 64) FILL RANDOM_NORMAL(0, 1, 1)")
    expected = cur.execute("SELECT SUM(SUMSQ(A.v)) FROM A").fetchone()[0]
    cur.execute("CREATE TENSOR A2 SHAPE (2048, 512) TILE (128, 512)")
    (tiny_disk / "ballast").write_bytes(b"\0" * (384 << 10))
    failures = []
    for k in range(16):  # 256 KiB a tile: the disk is full before the 6th
        try:
            cur.execute("INSERT INTO A2 VALUES (?, 0, ?)", [k, np.full((128, 512), k + 1, np.float32)])
        except trdb.Error as exc:
            failures.append(exc)
            break
    try:
        cur.execute("CHECKPOINT")
    except trdb.Error as exc:
        failures.append(exc)
    assert failures and all(isinstance(f, trdb.OperationalError) and not isinstance(f, trdb.errors.TransactionConflict)
                            for f in failures), [repr(f) for f in failures]
    assert all("disk is full" in str(f) and "HINT" in str(f) for f in failures), [str(f) for f in failures]
    assert cur.execute("SELECT SUM(SUMSQ(A.v)) FROM A").fetchone()[0] == expected
    stored = cur.execute("SELECT COUNT(*) FROM A2").fetchone()[0]
    os.remove(tiny_disk / "ballast")  # disk space freed: the same connection writes again
    cur.execute("CREATE TENSOR Z SHAPE (4) TILE (4) FILL ONES")
    assert cur.execute("SELECT SUM(SUMSQ(Z.v)) FROM Z").fetchone()[0] == 4
    con.close()
    con = trdb.connect(str(tiny_disk / "db.trdb"))
    assert con.execute("SELECT SUM(SUMSQ(A.v)) FROM A").fetchone()[0] == expected and stored >= 1
    assert {r[0] for r in con.execute("SHOW TENSORS").fetchall()} == {"A", "A2", "Z"}
    assert con.execute("SELECT COUNT(*) FROM A2").fetchone()[0] == stored
    con.close()


# ------------------------------------------------------------------ DuckDB's share of the budget

@pytest.mark.out_of_core
def test_a_tensor_of_32mb_tiles_is_written_and_read_at_256mb(tmp_path):
    """1 GiB in 32 MiB tiles at memory_limit = '256MB': DuckDB's quarter (64 MB) could not hold the two
    tiles its commit needs at once, and the error came as a TransactionConflict. DuckDB's part now holds
    a few of the largest tiles written (within half the budget); a DuckDB out-of-memory error is an
    OperationalError that says so."""
    report = run_child("""
        import numpy as np
        cur.execute("SET memory_limit = '256MB'")
        cur.execute("CREATE TENSOR W SHAPE (2097152, 128) TILE (65536, 128) FILL RANDOM_NORMAL(0, 1, 1)")
        report["tiles"], report["sumsq"] = cur.execute("SELECT COUNT(*), SUM(SUMSQ(W.v)) FROM W").fetchone()
        report["sumsq"] = float(report["sumsq"])
    """, 3 << 30, str(tmp_path / "big.trdb"))
    assert "raw" not in report and "error" not in report, report
    assert report["tiles"] == 32 and abs(report["sumsq"] / (1 << 28) - 1) < 0.01
    reread = run_child("""
        cur.execute("SET memory_limit = '256MB'")
        report["sumsq"] = float(cur.execute("SELECT SUM(SUMSQ(W.v)) FROM W").fetchone()[0])
    """, 3 << 30, str(tmp_path / "big.trdb"))
    assert "error" not in reread and abs(reread["sumsq"] / report["sumsq"] - 1) < 1e-6, reread


def test_duckdb_out_of_memory_is_an_operational_error_never_a_conflict():
    import duckdb

    from trdb.storage.duckdb_errors import translate
    for message in ("TransactionContext Error: Failed to commit: could not allocate block of size 32.0 MiB "
                    "(33.2 MiB/64.0 MiB used)", "Out of Memory Error: failed to pin block of size 256.0 KiB"):
        error = translate(duckdb.TransactionException(message))
        assert type(error) is trdb.OperationalError and "memory_limit" in error.hint, error
    conflict = translate(duckdb.TransactionException("TransactionContext Error: Conflict on update!"))
    assert isinstance(conflict, trdb.errors.TransactionConflict)
