"""Resource bombs are refused before they allocate: max_tuples, max_bytes, memory_limit, SHAPE bounds, workers."""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from helpers.guarded_child import run_guarded
from trdb.config.settings import max_workers

pytestmark = pytest.mark.on_cpu  # of host memory_limit; children under RLIMIT_AS, where CUDA cannot start (conftest.py)

def refused(statement: str, *settings: str) -> str:
    """The error class and message of a statement run in a guarded child."""
    setup = "".join(f"cur.execute({s!r})\n" for s in settings)
    return run_guarded(setup + f"""
try:
    cur.execute({statement!r})
    print("ran")
except trdb.Error as exc:
    print(type(exc).__name__, exc)
""")


@pytest.mark.parametrize("settings", [(), ("SET memory_limit = '100MB'",)])
def test_a_huge_fill_is_refused_before_any_allocation(settings) -> None:
    out = refused("CREATE TENSOR X SHAPE (1000000000, 1000000000) TILE (1000, 1000) FILL RANDOM_NORMAL(0, 1)",
                  *settings)
    assert out.startswith("OperationalError") and "max_tuples" in out and "1,000,000,000,000 tuples" in out


def test_one_giant_tile_must_fit_in_memory_limit() -> None:
    out = refused("CREATE TENSOR X SHAPE (100000000000, 100000000000) TILE (100000000000, 100000000000) FILL ONES")
    assert out.startswith("OperationalError") and "memory_limit" in out and "EiB" in out


def test_millions_of_tiny_tiles_are_refused() -> None:
    out = refused("CREATE TENSOR X SHAPE (4096, 4096) TILE (1, 1) FILL ONES")
    assert out.startswith("OperationalError") and "16,777,216 tuples" in out and "SET max_tuples" in out


def test_max_bytes_refuses_a_fill(cur) -> None:
    cur.execute("SET max_bytes = '1MB'")
    with pytest.raises(trdb.OperationalError, match="max_bytes"):
        cur.execute("CREATE TENSOR X SHAPE (1024, 1024) TILE (256, 256) FILL ONES")
    cur.execute("CREATE TENSOR X SHAPE (1024, 1024) TILE (256, 256)")  # zeros store nothing


def test_shapes_beyond_bigint_are_refused(cur) -> None:
    with pytest.raises(trdb.ProgrammingError, match="2\\*\\*63"):
        cur.execute("CREATE TENSOR X SHAPE (99999999999999999999999999, 3) TILE (10, 3)")
    with pytest.raises(trdb.ProgrammingError, match="positive"):
        cur.execute("CREATE TENSOR X SHAPE (3, 0) TILE (3, 1)")


def test_a_query_estimated_past_the_limits_is_refused_before_running(cur) -> None:
    cur.execute("CREATE TENSOR A FROM ? TILE (4, 4)", [np.ones((8, 8), np.float32)])
    query = "SELECT A0.i, A0.j, A0.v FROM A AS A0 " + " ".join(
        f"JOIN A AS A{k} ON A0.i = A{k}.i" for k in range(1, 61))
    cur.execute("EXPLAIN " + query)  # EXPLAIN shows the estimate without running it
    with pytest.raises(trdb.OperationalError, match="max_tuples") as info:
        cur.execute(query)
    assert "estimated at" in str(info.value) and "HINT" in str(info.value)


def test_a_many_operand_einsum_past_max_bytes_is_refused(cur) -> None:
    cur.execute("CREATE TENSOR M SHAPE (64, 64) TILE (8, 8) FILL ONES")
    letters = "abcdefghijklmnopqrstu"
    spec = ",".join(letters[n] + letters[n + 1] for n in range(20)) + "->" + letters[:21]
    with pytest.raises(trdb.OperationalError, match="max_tuples|max_bytes"):
        cur.execute(f"SELECT * FROM EINSUM('{spec}', " + ", ".join(["M"] * 20) + ")")


def test_raising_the_limit_lets_it_run(cur) -> None:
    cur.execute("CREATE TENSOR A FROM ? TILE (4, 4)", [np.ones((8, 8), np.float32)])
    cur.execute("SET max_tuples = 2")
    with pytest.raises(trdb.OperationalError, match="max_tuples"):
        cur.execute("SELECT * FROM A")
    cur.execute("RESET max_tuples")
    cur.execute("SELECT COUNT(*) FROM A")
    assert cur.fetchone() == (4,)


def test_workers_are_bounded(cur) -> None:
    for value in (256, 100000, max_workers() + 1):
        with pytest.raises(trdb.ProgrammingError, match=f"at most {max_workers()} workers"):
            cur.execute(f"SET workers = {value}")
    cur.execute(f"SET workers = {max_workers()}")


@pytest.mark.parametrize("value", ["0", "-5", "'lots'"])
def test_limit_settings_reject_nonsense(cur, value) -> None:
    for name in ("max_tuples", "max_bytes"):
        with pytest.raises(trdb.ProgrammingError, match=f"setting {name}"):
            cur.execute(f"SET {name} = {value}")


def test_a_giant_parameter_is_refused_before_any_kernel_or_duckdb_allocates_it():
    out = run_guarded("""
import numpy as np
cur.execute("SET memory_limit = '8GB'")  # the default is a share of this machine's memory: 40 GB may be under it
cur.execute("CREATE TENSOR G SHAPE (64, 48) TILE (16, 16) FILL RANDOM_NORMAL(0, 1, 1)")
giant = np.broadcast_to(np.float32(1), (100000, 100000))  # 40 GB claimed, 4 bytes held
for sql in ("SELECT -? AS v FROM G", "SELECT G.i, G.j, G.v * ? AS v FROM G", "SELECT * FROM G WHERE G.i >= ?",
            "SELECT 1 + ? AS x"):
    try:
        cur.execute(sql, [giant])
        print("ran")
    except trdb.DataError as exc:
        print("DataError", str(exc).splitlines()[0])
print(cur.execute("SELECT G.i, G.j, G.v * ? AS v FROM G", [np.float32(2)]).fetch_tensor().shape)
""")
    lines = out.splitlines()
    assert len(lines) == 5 and lines[-1] == "(64, 48)", out
    assert all(line.startswith("DataError parameter 1 holds 40,000,000,000 bytes") for line in lines[:4]), out


def test_a_fill_larger_than_the_free_disk_is_refused_before_it_writes(tmp_path, monkeypatch):
    import collections
    import shutil
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(1 << 40, (1 << 40) - (100 << 20), 100 << 20))
    con = trdb.connect(str(tmp_path / "full.trdb"))
    with pytest.raises(trdb.OperationalError, match=r"estimated at 381 MiB, more than the 100 MiB free"):
        con.execute("CREATE TENSOR T SHAPE (10000, 10000) TILE (1000, 1000) FILL ONES")
    assert con.execute("SHOW TENSORS").fetchall() == []
    con.execute("CREATE TENSOR S SHAPE (100, 100) TILE (50, 50) FILL ONES")  # small enough
    con.close()


@pytest.mark.parametrize("statement", ["CREATE TENSOR T SHAPE (20000, 20000) TILE (1000, 1000) FILL ONES",
                                       "CREATE TENSOR T FROM ? TILE (1000, 1000)"])
def test_a_tensor_larger_than_a_database_in_memory_can_hold_is_refused_before_it_writes(monkeypatch, statement):
    """A database in memory holds DuckDB's part of memory_limit and spills the rest to temp_directory:
    a tensor larger than both together is refused up front (it would fill the disk, then fail)."""
    import collections
    import shutil
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(1 << 40, (1 << 40) - (1 << 30), 1 << 30))
    con = trdb.connect(memory_limit="1GB", max_bytes="1TB")
    params = [np.broadcast_to(np.float32(1), (20000, 20000))] if "?" in statement else None
    with pytest.raises(trdb.OperationalError, match=r"estimated at 1.49 GiB, more than the 1.15 GiB a database in "
                                                    r"memory can hold \(256 MiB of memory_limit for DuckDB, "
                                                    r"922 MiB it may spill to temp_directory\)") as refused:
        con.execute(statement, params)
    assert "connect to a database file" in refused.value.hint
    assert con.execute("SHOW TENSORS").fetchall() == []
    con.execute("CREATE TENSOR S SHAPE (5000, 5000) TILE (1000, 1000) FILL ONES")  # 95 MiB: it fits
    assert con.execute("SELECT SUM(v) AS v FROM S").fetchone()[0].sum() == 25e6


def test_a_parameter_duckdb_cannot_take_in_is_an_out_of_memory_error():
    """Plain SQL trql cannot parse goes to DuckDB; a 40 GB (broadcast) parameter there raised a raw MemoryError."""
    out = run_guarded("""
        import numpy as np
        big = np.broadcast_to(np.float32(1), (100_000, 100_000))
        try:
            cur.execute("INSERT INTO f$10 VALUES (0, ?)", [[big, big]])
        except trdb.OperationalError as exc:
            print(str(exc).splitlines()[0])
        print(cur.execute("SELECT 1").fetchall())
    """)
    assert out.splitlines()[0].startswith("out of memory") and out.splitlines()[1] == "[(1,)]", out


def test_a_fetch_larger_than_the_process_can_allocate_is_out_of_memory_and_keeps_the_rows():
    out = run_guarded("""
import trdb.api.dbapi
trdb.api.dbapi.physical_memory = lambda: 1 << 50  # as if the machine had the memory (CI's has 24 GB)
cur.execute("SET max_bytes = '1TB'")  # within the limits trdb checks: only the allocation itself fails
cur.execute("CREATE TENSOR Tall SHAPE (2147483648, 1) TILE (1024, 1)")  # no FILL: no tile stored
cur.execute("SELECT * FROM Tall")
try:
    cur.fetch_sparse()  # its row pointers alone take 16 GB
    print("fetched")
except trdb.OperationalError as exc:
    print(type(exc).__name__, str(exc).splitlines()[0])
print(cur.fetchall())
""")
    lines = out.splitlines()
    assert lines[0].startswith("OperationalError out of memory"), out
    assert lines[1] == "[]", out
