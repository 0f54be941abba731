"""A tensor's tiles in several tables (storage/tile_parts): every statement reads, writes and drops all parts, a
failed write leaves none behind, a tampered part is refused, and a tensor larger than DuckDB's memory commits."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import duckdb
import numpy as np
import pytest

import trdb
from trdb.storage import tile_parts

SHAPE, TILE = (64, 48), (8, 8)  # 8 x 6 tiles of 512 bytes (float64)


@pytest.fixture
def parts(monkeypatch):
    """Parts of four tiles each."""
    monkeypatch.setattr(tile_parts, "PART_BYTES", 4 * 512)


def _db(con):
    return con._session().db


def _tables(con, name="A") -> list[str]:
    meta = con._session().catalog.require_tensor(name)
    return tile_parts.parts(_db(con), meta.table)


def _tensor(con, name="A", shape=SHAPE):
    return con.execute(f"SELECT * FROM {name}").fetch_tensor(shape=shape)


def _values(seed=0, shape=SHAPE):
    return np.random.default_rng(seed).standard_normal(shape)


def test_a_tensor_is_written_in_parts_and_read_back(con, parts):
    values = _values()
    con.execute(f"CREATE TENSOR A FROM ? TILE {TILE}", [values])
    assert len(_tables(con)) == 12
    np.testing.assert_array_equal(_tensor(con), values)
    assert con.execute("SELECT SUM(SUMSQ(A.v)) FROM A").fetchall()[0][0] == pytest.approx((values ** 2).sum())


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_streamed_read_covers_every_part(tmp_path, parts, workers):
    values = _values(1)
    with trdb.connect(str(tmp_path / "p.db")) as con:
        con.execute(f"CREATE TENSOR A FROM ? TILE {TILE}", [values])
        con.execute("SET memory_limit = '16KB'")  # the buffer pool keeps nothing: scans stream
        con.execute(f"SET workers = {workers}")
        assert con._session().catalog.streams(con._session().catalog.require_tensor("A"))
        np.testing.assert_array_equal(_tensor(con), values)
        total = con.execute("SELECT SUM(SUMSQ(A.v)) FROM A").fetchall()[0][0]
        assert total == pytest.approx((values ** 2).sum())


def test_update_insert_delete_and_drop_cover_every_part(con, parts):
    con.execute(f"CREATE TENSOR A FROM ? TILE {TILE}", [_values(2)])
    con.execute("UPDATE A SET v = A.v * 2 WHERE A.i % 2 = 0")
    updated = _values(2)
    for i in range(0, 8, 2):
        updated[i * 8:(i + 1) * 8] *= 2
    np.testing.assert_array_equal(_tensor(con), updated)
    con.execute("DELETE FROM A WHERE A.j = 5")
    updated[:, 40:] = 0
    np.testing.assert_array_equal(_tensor(con), updated)
    with pytest.raises(trdb.IntegrityError):  # keys stay unique across parts
        con.execute("INSERT INTO A SELECT i, j, v FROM A WHERE A.i = 7 AND A.j = 4")
    con.execute("INSERT INTO A VALUES (7, 5, ?)", [np.ones((8, 8))])
    updated[56:, 40:] = 1
    np.testing.assert_array_equal(_tensor(con), updated)
    assert con.execute("SELECT count(*) FROM A").fetchall()[0][0] == 41
    tables = _tables(con)
    con.execute("DROP TENSOR A")
    names = {f"_trdb.{r[0]}" for r in _db(con).execute("SELECT table_name FROM duckdb_tables()")}
    assert len(tables) > 1 and not names & set(tables)


def test_delete_of_every_tile_leaves_one_part(con, parts):
    con.execute(f"CREATE TENSOR A FROM ? TILE {TILE}", [_values()])
    con.execute("DELETE FROM A")
    assert len(_tables(con)) == 1 and not _tensor(con).any()
    values = _values(3)
    con.execute(f"CREATE TENSOR B FROM ? TILE {TILE}", [values])
    con.execute("INSERT INTO A SELECT i, j, v FROM B")
    np.testing.assert_array_equal(_tensor(con), values)
    assert len(_tables(con)) == 12


def test_repeated_updates_reuse_parts(con, parts):
    con.execute(f"CREATE TENSOR A FROM ? TILE {TILE}", [_values()])
    for _ in range(4):
        con.execute("UPDATE A SET v = A.v + 1")
    np.testing.assert_allclose(_tensor(con), _values() + 4)
    assert len(_tables(con)) <= 24


def test_parts_stay_within_their_size_whether_measured_or_bounded(con, monkeypatch):
    """A writer bounds each part's bytes by its rows at the most a tile takes while all would fit in one part,
    and measures them exactly beyond: either way no part holds more than `part_bytes` (one tile more at most)."""
    from trdb.storage import tile_store
    values = _values(3)
    # 43 tiles of 512 bytes; bounded at 1,120 bytes a tile (8 x 8 float64, stored CSR at worst): 20
    monkeypatch.setattr(tile_parts, "PART_BYTES", 22400)
    con.execute(f"CREATE TENSOR A FROM ? TILE {TILE}", [values])
    for step in range(6):
        con.execute(f"UPDATE A SET v = v * 2 + {step} WHERE i = {step}")
        values[8 * step:8 * step + 8] = values[8 * step:8 * step + 8] * 2 + step
        con.execute(f"DELETE FROM A WHERE i = 7 AND j = {step}")
        con.execute("INSERT INTO A VALUES (7, ?, ?)", [step, np.full((8, 8), float(step))])
        values[56:64, 8 * step:8 * step + 8] = step
        meta = con._session().catalog.require_tensor("A")
        index = tile_store.tile_index(_db(con), meta)
        sizes = tile_store.decoded_sizes(meta, index)
        for start, stop in zip(index.starts[:-1], index.starts[1:]):
            assert sizes[start:stop].sum() <= tile_parts.PART_BYTES + 512
    assert len(_tables(con)) > 1
    np.testing.assert_array_equal(_tensor(con), values)
    con.execute(f"CREATE TENSOR E SHAPE {SHAPE} TILE {TILE} DTYPE float64")
    con.execute("INSERT INTO E SELECT i, j, v FROM A WHERE i < 6")  # 36 tiles: one part, no deleted row
    con.execute("INSERT INTO E SELECT i, j, v FROM A WHERE i >= 6")  # 12 more: measured, they do not fit
    meta = con._session().catalog.require_tensor("E")
    index = tile_store.tile_index(_db(con), meta)
    sizes = tile_store.decoded_sizes(meta, index)
    assert [int(sizes[a:b].sum()) for a, b in zip(index.starts[:-1], index.starts[1:])] == [36 * 512, 12 * 512]
    np.testing.assert_array_equal(_tensor(con, "E"), values)


def test_create_as_and_from_coo_write_parts(con, parts):
    values = _values(4)
    con.execute(f"CREATE TENSOR A FROM ? TILE {TILE}", [values])
    con.execute("CREATE TENSOR C AS SELECT i, j, A.v * 3 AS v FROM A")
    assert len(_tables(con, "C")) > 1
    np.testing.assert_allclose(_tensor(con, "C"), values * 3)
    con.execute("CREATE TABLE coo (i BIGINT, j BIGINT, v DOUBLE)")
    con.execute("INSERT INTO coo SELECT i, j, i * 48 + j + 1 FROM range(64) r(i), range(48) c(j) WHERE (i + j) % 2 = 0")
    con.execute(f"CREATE TENSOR S FROM COO coo (i, j, v) SHAPE {SHAPE} TILE {TILE} DTYPE float64")
    assert len(_tables(con, "S")) > 1
    i, j = np.indices(SHAPE)
    expected = np.where((i + j) % 2 == 0, i * 48 + j + 1.0, 0)
    np.testing.assert_array_equal(_tensor(con, "S"), expected)


def test_a_failed_write_leaves_no_part_behind(con, parts, monkeypatch):
    from trdb.storage import tile_store
    original, calls = tile_store._append, []

    def failing(*args):
        calls.append(1)
        if len(calls) == 5:
            raise trdb.OperationalError("disk full")
        return original(*args)
    monkeypatch.setattr(tile_store, "_append", failing)
    before = set(_db(con).execute("SELECT table_name FROM duckdb_tables()"))
    with pytest.raises(trdb.OperationalError):
        con.execute(f"CREATE TENSOR A FROM ? TILE {TILE}", [_values()])
    assert set(_db(con).execute("SELECT table_name FROM duckdb_tables()")) == before
    monkeypatch.setattr(tile_store, "_append", original)
    con.execute(f"CREATE TENSOR A FROM ? TILE {TILE}", [_values()])  # the rolled-back parts are not remembered
    np.testing.assert_array_equal(_tensor(con), _values())


def _create_top(con, top):
    """A with the lower four tile rows absent: a dense load stores every tile, so those are deleted."""
    con.execute(f"CREATE TENSOR A FROM ? TILE {TILE}", [top])
    con.execute("DELETE FROM A WHERE A.i >= 4")
    assert con.execute("SELECT count(*) FROM A").fetchall()[0][0] == 24


def test_parts_made_in_a_transaction_are_read_in_it_and_gone_after_rollback(con, parts, monkeypatch):
    top = _values()
    top[32:] = 0  # the lower four tile rows absent (deleted after the dense load: zeros are values)
    _create_top(con, top)
    con.execute(f"CREATE TENSOR B FROM ? TILE {TILE}", [_values(5)])
    before = _tables(con)
    lookups = []
    original = tile_parts.stored_rows
    monkeypatch.setattr(tile_parts, "stored_rows", lambda db, table: lookups.append(table) or original(db, table))
    con.execute("BEGIN")
    np.testing.assert_array_equal(_tensor(con), top)
    read = len(lookups)
    _tensor(con)
    assert read <= 1 and len(lookups) == read  # in a transaction, the part names are looked up once at most
    con.execute("INSERT INTO A SELECT i, j, v FROM B WHERE B.i >= 4")  # new parts of A, in this transaction
    np.testing.assert_array_equal(_tensor(con), np.vstack([top[:32], _values(5)[32:]]))
    assert len(_tables(con)) > len(before)
    con.execute("ROLLBACK")
    np.testing.assert_array_equal(_tensor(con), top)
    assert _tables(con) == before


def _counting_lookups(monkeypatch) -> list:
    lookups, original = [], tile_parts.stored_rows
    monkeypatch.setattr(tile_parts, "stored_rows", lambda db, table: lookups.append(table) or original(db, table))
    return lookups


def test_a_step_right_after_this_connections_commit_knows_the_parts(con, monkeypatch):
    values = _values(6)
    con.execute(f"CREATE TENSOR W FROM ? TILE {TILE}", [values])
    con.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(W.v)) AS v FROM W")
    lookups = _counting_lookups(monkeypatch)
    con.execute("MINIMIZE loss WRT (W) WITH (optimizer = 'sgd', learning_rate = 0.25, steps = 4)")
    assert len(lookups) == 1  # in the first step only: each later step began right after the last one committed
    np.testing.assert_allclose(_tensor(con, "W"), values * 0.5 ** 4)  # W - 0.25 * 2W, four times
    assert _tables(con, "W") == [con._session().catalog.require_tensor("W").table]


def test_another_connections_commit_makes_a_write_look_the_parts_up_again(tmp_path, parts, monkeypatch):
    top = _values(7)
    top[32:] = 0  # the lower four tile rows absent (deleted after the dense load: zeros are values)
    path = str(tmp_path / "two.db")
    with trdb.connect(path) as first, trdb.connect(path) as second:
        _create_top(first, top)
        first.execute("UPDATE A SET v = A.v * 2")
        second.execute(f"CREATE TENSOR B FROM ? TILE {TILE}", [_values(8)])
        second.execute("INSERT INTO A SELECT i, j, v FROM B WHERE B.i >= 4")  # new parts of A
        lookups = _counting_lookups(monkeypatch)
        first.execute("UPDATE A SET v = A.v + 1")  # must see (and update) the parts the other one made
        assert lookups
        expected = np.vstack([top[:32] * 2, _values(8)[32:]]) + 1
        np.testing.assert_allclose(_tensor(first), expected)
        np.testing.assert_allclose(_tensor(second), expected)


def test_a_rolled_back_write_leaves_no_part_names_behind(con, parts, monkeypatch):
    from trdb.storage import tile_store
    top = _values(9)
    top[32:] = 0  # the lower four tile rows absent (deleted after the dense load: zeros are values)
    _create_top(con, top)
    con.execute(f"CREATE TENSOR B FROM ? TILE {TILE}", [_values(10)])
    con.execute("UPDATE A SET v = A.v * 2")
    before = _tables(con)
    original, calls = tile_store._append, []

    def failing(*args):
        calls.append(1)
        if len(calls) == 3:  # after new parts of A were made
            raise trdb.OperationalError("disk full")
        return original(*args)
    monkeypatch.setattr(tile_store, "_append", failing)
    with pytest.raises(trdb.OperationalError):
        con.execute("INSERT INTO A SELECT i, j, v FROM B WHERE B.i >= 4")
    monkeypatch.setattr(tile_store, "_append", original)
    lookups = _counting_lookups(monkeypatch)
    con.execute("UPDATE A SET v = A.v + 1")
    assert lookups  # the failed write's transaction committed nothing: what it knew is not carried
    np.testing.assert_allclose(_tensor(con), np.vstack([top[:32] * 2 + 1, top[32:]]))
    assert _tables(con) == before


def test_a_tampered_part_is_refused(tmp_path, parts):
    path = str(tmp_path / "t.db")
    with trdb.connect(path) as con:
        con.execute(f"CREATE TENSOR A FROM ? TILE {TILE}", [_values()])
        con.execute(f"CREATE TENSOR B FROM ? TILE {TILE}", [_values(1)])
        part = _tables(con)[3]
    raw = duckdb.connect(path)
    schema, table = part.split(".")
    raw.execute(f'ALTER TABLE "{schema}"."{table}" ALTER COLUMN k1 TYPE VARCHAR')
    raw.close()
    with trdb.connect(path) as con:
        with pytest.raises(trdb.DataError, match="damaged.*has no NOT NULL BIGINT column k1"):
            con.execute("SELECT * FROM A").fetch_tensor()
        np.testing.assert_array_equal(_tensor(con, "B"), _values(1))
        con.execute("DROP TENSOR A")  # and its parts
        left = con._session().db.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE ?",
                                          [table.split("_p")[0] + "%"])
        assert left == [(0,)]


# the real thing: 256 MiB of tiles under a memory_limit of 128 MB (DuckDB gets 32 MB of it)
BIG = textwrap.dedent("""
    import resource, sys, os, tempfile
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    import numpy as np
    import trdb
    path = os.path.join(sys.argv[1], "big.db")
    con = trdb.connect(path)
    con.execute("SET memory_limit = '128MB'")
    con.execute("CREATE TENSOR A (i, j) SHAPE (8192, 8192) TILE (1024, 1024) FILL RANDOM_NORMAL(0, 1, 7)")
    total = con.execute("SELECT SUM(SUMSQ(A.v)) FROM A").fetchall()[0][0]
    written = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
    con.execute("UPDATE A SET v = A.v * 2")
    doubled = con.execute("SELECT SUM(SUMSQ(A.v)) FROM A").fetchall()[0][0]
    parts = con._session().db.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE 'tiles%'")[0][0]
    con.close()
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
    expected = 0.0
    for a in range(8):
        for b in range(8):
            tile = (np.random.default_rng([7, a, b]).standard_normal((1024, 1024)) * 1 + 0).astype(np.float32)
            expected += float(np.square(tile, dtype=np.float64).sum())
    print(total, doubled, expected, int(written) << 10, int(hwm) << 10, parts)
""")


@pytest.mark.on_cpu  # a child under RLIMIT_AS
def test_a_tensor_larger_than_duckdbs_memory_commits(tmp_path):
    done = subprocess.run([sys.executable, "-c", BIG, str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    total, doubled, expected, peak, updated, parts = done.stdout.split()[-6:]
    assert float(total) == pytest.approx(float(expected), rel=1e-5)
    assert float(doubled) == pytest.approx(4 * float(expected), rel=1e-5)
    assert int(peak) < (128 << 20) + (400 << 20), f"peak resident memory {int(peak) >> 20} MB"
    assert int(updated) < (128 << 20) + (600 << 20), f"peak resident memory {int(updated) >> 20} MB after UPDATE"
    assert int(parts) > 1
