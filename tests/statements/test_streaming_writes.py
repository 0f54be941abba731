"""Writes in bounded batches: with a tiny memory_limit every writing statement stores the right tensor in
several inserts, a failure in a later batch leaves the database as it was, a memory-mapped source is never
copied whole."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest

import trdb
from trdb.statements import coo, materialize
from trdb.storage import tile_store

SHAPE, TILE = (40, 36), (4, 4)  # 10 x 9 tiles of 128 bytes (float64)


@pytest.fixture
def small(con):
    """A connection whose budget holds only a few tiles per write batch."""
    con.execute("SET memory_limit = '16KB'")
    return con


@pytest.fixture
def inserts(monkeypatch):
    """How many inserts the statement made (each is one batch of tiles)."""
    calls = []
    original = tile_store.insert_encoded

    def counting(*args, **kwargs):
        calls.append(len(args[3]))
        return original(*args, **kwargs)
    monkeypatch.setattr(tile_store, "insert_encoded", counting)
    return calls


def _tensor(con, name, shape=SHAPE):
    return con.execute(f"SELECT * FROM {name}").fetch_tensor(shape=shape)


def _values(seed=0):
    return np.random.default_rng(seed).standard_normal(SHAPE)


def test_fill_writes_in_batches(small, inserts):
    small.execute(f"CREATE TENSOR A SHAPE {SHAPE} TILE {TILE} FILL RANDOM_NORMAL(1, 2, 5)")
    assert len(inserts) > 3 and sum(inserts) == 90
    whole = trdb.connect()
    whole.execute(f"CREATE TENSOR A SHAPE {SHAPE} TILE {TILE} FILL RANDOM_NORMAL(1, 2, 5)")
    np.testing.assert_array_equal(_tensor(small, "A"), _tensor(whole, "A"))


def test_from_array_writes_in_batches(small, inserts):
    values = _values()
    small.execute(f"CREATE TENSOR A FROM ? TILE {TILE}", [values])
    assert len(inserts) > 3
    np.testing.assert_array_equal(_tensor(small, "A"), values)


def test_from_npy_file_and_memmap(small, inserts, tmp_path):
    values = _values().astype(np.float32)
    path = tmp_path / "a.npy"
    np.save(path, values)
    small.execute(f"CREATE TENSOR A FROM '{path}' TILE {TILE}")
    small.execute(f"CREATE TENSOR B FROM ? TILE {TILE}", [np.load(path, mmap_mode="r")])
    assert len(inserts) > 6
    np.testing.assert_array_equal(_tensor(small, "A"), values)
    np.testing.assert_array_equal(_tensor(small, "B"), values)


def test_create_as_insert_update_in_batches(small, inserts):
    values = _values()
    small.execute(f"CREATE TENSOR A FROM ? TILE {TILE}", [values])
    small.execute("CREATE TENSOR B AS SELECT A.i, A.j, RELU(A.v) AS v FROM A")
    np.testing.assert_array_equal(_tensor(small, "B"), np.maximum(values, 0))
    small.execute(f"CREATE TENSOR C (i, j) SHAPE {SHAPE} TILE {TILE} DTYPE float64")
    before = len(inserts)
    small.execute("INSERT INTO C SELECT A.i, A.j, A.v * 2 AS v FROM A WHERE A.i < 5")
    assert len(inserts) - before >= 3
    expected = np.where(np.arange(SHAPE[0])[:, None] < 20, values * 2, 0)
    np.testing.assert_array_equal(_tensor(small, "C"), expected)
    small.execute("UPDATE C SET v = C.v + 1 WHERE C.j >= 4")
    expected[:20, 16:] += 1
    np.testing.assert_array_equal(_tensor(small, "C"), expected)
    small.execute("DELETE FROM C WHERE C.i = 0")
    expected[:4] = 0
    np.testing.assert_array_equal(_tensor(small, "C"), expected)


def _sorted_batches(rows, size=8):
    """The result in key order, 8 tuples a batch: a test's clash is then always in the last batch."""
    ordered = sorted(rows, key=lambda row: tuple(row[:-1]))
    for start in range(0, len(ordered), size):
        yield ordered[start:start + size]


@pytest.mark.parametrize("clash", ["stored key", "duplicate key", "bad shape"])
def test_a_failure_in_the_last_batch_of_an_insert_changes_nothing(small, inserts, monkeypatch, clash):
    monkeypatch.setattr(materialize, "row_batches", _sorted_batches)
    small.execute(f"CREATE TENSOR A FROM ? TILE {TILE}", [_values()])
    small.execute(f"CREATE TENSOR C (i, j) SHAPE {SHAPE} TILE {TILE} DTYPE float64")
    small.execute("INSERT INTO C VALUES (9, 8, 7.0)")
    before = len(inserts)
    query = {"stored key": "SELECT A.i, A.j, A.v FROM A",
             "duplicate key": "SELECT A.i, A.j, A.v FROM A UNION ALL SELECT A.i, A.j, A.v FROM A WHERE A.i = 8",
             "bad shape": "SELECT A.i, A.j, A.v FROM A"}[clash]
    if clash == "bad shape":
        small.execute("DROP TENSOR C")
        small.execute(f"CREATE TENSOR C (i, j) SHAPE (38, 36) TILE {TILE} DTYPE float64")  # its last row of tiles is 2x4
    error = trdb.IntegrityError if clash != "bad shape" else trdb.DataError
    with pytest.raises(error):
        small.execute(f"INSERT INTO C {query}")
    assert len(inserts) - before > 2  # earlier batches were inserted, then rolled back
    expected = np.zeros((40, 36) if clash != "bad shape" else (38, 36))
    if clash != "bad shape":
        expected[36:40, 32:36] = 7.0
    np.testing.assert_array_equal(_tensor(small, "C", expected.shape), expected)


def _coo_entries(rows=40, cols=36, seed=1):
    rng = np.random.default_rng(seed)
    count = 600
    return pa.table({"r": rng.integers(0, rows, count), "c": rng.integers(0, cols, count),
                     "v": rng.integers(1, 4, count).astype(np.int64)})


def test_coo_writes_in_batches(small, inserts, monkeypatch):
    monkeypatch.setattr(coo, "ENTRY_BATCH_BYTES", 20 * 64)  # about 20 entries a batch
    table = _coo_entries()
    small.execute(f"CREATE TENSOR A FROM COO ? (r, c, v) SHAPE {SHAPE} TILE {TILE} DTYPE int64", [table])
    assert len(inserts) > 10
    expected = np.zeros(SHAPE, dtype=np.int64)
    np.add.at(expected, (table["r"].to_numpy(), table["c"].to_numpy()), table["v"].to_numpy())
    np.testing.assert_array_equal(_tensor(small, "A"), expected)


def test_a_failure_in_the_last_batch_of_a_coo_load_changes_nothing(small, inserts, monkeypatch):
    monkeypatch.setattr(coo, "ENTRY_BATCH_BYTES", 20 * 64)
    table = _coo_entries()
    overflow = pa.table({"r": [39] * 50, "c": [35] * 50, "v": [10 ** 9] * 50})  # sums past int32 in the last tile
    table = pa.concat_tables([table, overflow.cast(table.schema)])
    tables_before = small.execute("SELECT count(*) FROM information_schema.tables").fetchone()
    with pytest.raises(trdb.DataError, match="does not fit DTYPE int32"):
        small.execute(f"CREATE TENSOR A FROM COO ? (r, c, v) SHAPE {SHAPE} TILE {TILE} DTYPE int32", [table])
    assert len(inserts) > 10
    assert small.execute("SELECT count(*) FROM information_schema.tables").fetchone() == tables_before
    with pytest.raises(trdb.ProgrammingError, match='"A" does not exist'):
        small.execute("SELECT * FROM A")


def test_a_failure_in_a_later_batch_of_a_fill_changes_nothing(small, inserts):
    # FROM ?: the value that does not fit int32 is in the last tile, after several batches were inserted
    values = np.ones(SHAPE)
    values[-1, -1] = 1e10
    with pytest.raises(trdb.DataError, match="does not fit in int32"):
        small.execute(f"CREATE TENSOR A FROM ? TILE {TILE} DTYPE int32", [values])
    assert len(inserts) > 3
    with pytest.raises(trdb.ProgrammingError, match='"A" does not exist'):
        small.execute("SELECT * FROM A")


_MEMMAP_CHILD = textwrap.dedent("""
    import resource, sys, tracemalloc
    import numpy as np
    import trdb
    from trdb.storage import tile_store
    path = sys.argv[1]
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/status") as status:
        vm = next(int(line.split()[1]) for line in status if line.startswith("VmSize")) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + (6 << 30), hard))  # a generous guard only
    con = trdb.connect()
    con.execute("SET memory_limit = '1MB'")
    con.execute("CREATE TENSOR W FROM ? TILE (2, 2)", [np.ones((4, 4), np.float32)])  # imports done before
    largest, inserts = [0], [0]
    insert = tile_store.insert_encoded

    def watched(*args):
        inserts[0] += 1
        if inserts[0] % 8 == 1:  # the largest block numpy holds now (DuckDB keeps inserted tiles until commit)
            largest[0] = max([largest[0]] + [t.size for t in tracemalloc.take_snapshot().traces])
        return insert(*args)
    tile_store.insert_encoded = watched
    source = np.load(path, mmap_mode="r")
    tracemalloc.start()
    con.execute("CREATE TENSOR A FROM ? TILE (256, 256)", [source])
    print(largest[0], source.nbytes, inserts[0])
    got = con.execute("SELECT SUM(SUMSQ(A.v)) FROM A").fetchone()[0]
    print(abs(got - float(np.sum(np.square(source, dtype=np.float64)))) / got)
""")


@pytest.mark.on_cpu  # a child under RLIMIT_AS
def test_a_memmap_source_is_never_copied_whole(tmp_path):
    path = tmp_path / "big.npy"
    np.save(path, np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32))  # 16 MB
    out = subprocess.run([sys.executable, "-c", _MEMMAP_CHILD, str(path)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    largest, size, inserts, error = out.stdout.split()
    # numpy's allocations (tracemalloc sees them): tiles and batches, never the 16 MB source at once
    assert int(largest) < int(size) // 16, (largest, size)
    assert int(inserts) >= 16
    assert float(error) < 1e-5
