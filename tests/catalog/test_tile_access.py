"""An UPDATE, INSERT or DELETE of a tensor the buffer pool keeps leaves the new tensor kept: the next scan
reads no tile back from DuckDB, and gives what a read from DuckDB gives (numpy is the oracle)."""
import numpy as np
import pytest

import trdb


@pytest.fixture
def con(tmp_path):
    with trdb.connect(str(tmp_path / "kept.trdb")) as con:
        yield con


def _pool(con):
    return con._session().catalog.pool


def _stored(con, cur, query="SELECT * FROM A"):
    """The tensor as the next scan gives it without reading, then as DuckDB gives it."""
    pool = _pool(con)
    misses = pool.misses
    kept = cur.execute(query).fetch_tensor()
    read_back = pool.misses != misses
    pool.shrink(pool.bytes)
    np.testing.assert_array_equal(cur.execute(query).fetch_tensor(), kept)
    return kept, read_back


def _loaded(cur, A):
    cur.execute("CREATE TENSOR A FROM ? TILE (2, 2)", [A])
    cur.execute("SELECT * FROM A").fetch_tensor()  # the pool keeps A now


def test_an_update_of_some_tiles_keeps_the_updated_tensor(con):
    cur = con.cursor()
    A = np.arange(24, dtype=np.float32).reshape(6, 4) + 1
    _loaded(cur, A)
    cur.execute("UPDATE A SET v = A.v * 2 WHERE A.i = 1")
    A[2:4] *= 2
    kept, read_back = _stored(con, cur)
    np.testing.assert_array_equal(kept, A)
    assert not read_back


@pytest.mark.parametrize("shape", [(40, 60), (41, 59)])  # one stacked run; edge tiles: runs of several shapes
def test_an_update_of_scattered_tiles_keeps_the_updated_tensor(con, shape):
    cur = con.cursor()
    A = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    _loaded(cur, A)
    before = cur.execute("SELECT * FROM A").fetch_tensor()
    cur.execute("UPDATE A SET v = A.v * -3 + 1 WHERE A.j = 4 OR (A.i = 7 AND A.j = 20)")
    expected = A.copy()
    expected[:, 8:10] = A[:, 8:10] * -3 + 1
    expected[14:16, 40:42] = A[14:16, 40:42] * -3 + 1
    kept, read_back = _stored(con, cur)
    np.testing.assert_allclose(kept, expected, rtol=1e-6)
    assert not read_back
    np.testing.assert_array_equal(before, A)  # what an earlier scan gave is not written over


def test_a_zero_tile_stays_in_the_kept_tensor_too(con):
    cur = con.cursor()
    A = np.arange(24, dtype=np.float32).reshape(6, 4) + 1
    _loaded(cur, A)
    cur.execute("UPDATE A SET v = A.v * 0 WHERE A.i = 0 AND A.j = 1")
    A[0:2, 2:4] = 0
    kept, read_back = _stored(con, cur)
    np.testing.assert_array_equal(kept, A)
    assert not read_back
    assert cur.execute("SELECT count(*) FROM A").fetchall() == [(6,)]  # zeros are values: the tile stays


def test_a_tile_stored_sparse_is_read_back_not_kept(con):
    cur = con.cursor()
    A = np.ones((40, 40), dtype=np.float32)
    cur.execute("CREATE TENSOR A FROM ? TILE (20, 20)", [A])
    cur.execute("SELECT * FROM A").fetch_tensor()
    sparse = np.zeros((20, 20), dtype=np.float32)
    sparse[3, 4] = 7.0
    cur.execute("UPDATE A SET v = ? WHERE A.i = 0 AND A.j = 0", [sparse])
    A[:20, :20] = sparse
    kept, read_back = _stored(con, cur)
    np.testing.assert_array_equal(kept, A)
    assert read_back  # stored CSR: a read gives it CSR, so the scan read it


def test_a_rolled_back_update_leaves_the_tensor_as_it_was(con):
    cur = con.cursor()
    A = np.arange(24, dtype=np.float32).reshape(6, 4) + 1
    _loaded(cur, A)
    cur.execute("BEGIN")
    cur.execute("UPDATE A SET v = A.v + 100")
    np.testing.assert_array_equal(cur.execute("SELECT * FROM A").fetch_tensor(), A + 100)
    cur.execute("ROLLBACK")
    kept, _ = _stored(con, cur)
    np.testing.assert_array_equal(kept, A)


def test_another_connection_reads_the_committed_update(tmp_path):
    path = str(tmp_path / "shared.trdb")
    A = np.arange(24, dtype=np.float32).reshape(6, 4) + 1
    with trdb.connect(path) as c1, trdb.connect(path) as c2:
        cur1, cur2 = c1.cursor(), c2.cursor()
        _loaded(cur1, A)
        np.testing.assert_array_equal(cur2.execute("SELECT * FROM A").fetch_tensor(), A)
        cur1.execute("UPDATE A SET v = A.v - 1 WHERE A.j = 0")
        A[:, 0:2] -= 1
        np.testing.assert_array_equal(cur2.execute("SELECT * FROM A").fetch_tensor(), A)
        np.testing.assert_array_equal(cur1.execute("SELECT * FROM A").fetch_tensor(), A)


def test_a_failed_update_changes_nothing(con):
    cur = con.cursor()
    A = np.arange(24, dtype=np.float32).reshape(6, 4) + 1
    _loaded(cur, A)
    with pytest.raises(trdb.Error):
        cur.execute("UPDATE A SET v = ? WHERE A.i = 0", [np.ones((3, 3), dtype=np.float32)])
    kept, _ = _stored(con, cur)
    np.testing.assert_array_equal(kept, A)


def test_tiles_kept_sparse_stay_beside_the_updated_ones(con):
    cur = con.cursor()
    A = np.zeros((40, 40), dtype=np.float32)
    A[5, 7], A[25, 30] = 3.0, 4.0  # tiles stored CSR
    A[20:, :20] = 1.0
    cur.execute("CREATE TENSOR A FROM ? TILE (20, 20)", [A])
    cur.execute("SELECT * FROM A").fetch_tensor()
    cur.execute("UPDATE A SET v = A.v + 1 WHERE A.i = 1 AND A.j = 0")
    A[20:, :20] += 1
    kept, read_back = _stored(con, cur)
    np.testing.assert_array_equal(kept, A)
    assert not read_back


@pytest.mark.parametrize("shape", [(40, 60), (41, 59)])  # one stacked run; edge tiles: runs of several shapes
def test_inserts_keep_the_grown_tensor(con, shape):
    cur = con.cursor()
    A = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    cur.execute("CREATE TENSOR B FROM ? TILE (2, 2)", [A])
    cur.execute(f"CREATE TENSOR A SHAPE {shape} TILE (2, 2)")
    expected = np.zeros(shape, dtype=np.float32)
    np.testing.assert_array_equal(_stored(con, cur)[0], expected)  # kept, with no tile
    cur.execute("INSERT INTO A SELECT i, j, v FROM B WHERE i = 3 OR j = 5")
    expected[6:8], expected[:, 10:12] = A[6:8], A[:, 10:12]
    cur.execute("INSERT INTO A VALUES (1, 1, ?), (0, 7, ?)", [np.full((2, 2), 2.0), np.full((2, 2), 3.0)])
    expected[2:4, 2:4], expected[0:2, 14:16] = 2, 3
    kept, read_back = _stored(con, cur)
    np.testing.assert_array_equal(kept, expected)
    assert read_back == (shape[1] % 2 == 1)  # the edge tiles' runs are not stacked together: read again
    cur.execute("INSERT INTO A SELECT i, j, v * 0 FROM B WHERE i = 10 AND j > 25")  # zero tiles: values too
    kept, read_back = _stored(con, cur)
    np.testing.assert_array_equal(kept, expected)
    assert read_back == (shape[1] % 2 == 1)
    rows, columns = (-(-n // 2) for n in shape)
    assert cur.execute("SELECT count(*) FROM A").fetchall()[0][0] == \
        len({(3, j) for j in range(columns)} | {(i, 5) for i in range(rows)}) + 2 + len(range(26, columns))


@pytest.mark.parametrize("shape", [(40, 60), (41, 59)])
def test_deletes_keep_what_is_left(con, shape):
    cur = con.cursor()
    A = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    _loaded(cur, A)
    cur.execute("DELETE FROM A WHERE i = 4 OR (j = 9 AND i > 2)")
    A[8:10] = 0
    A[6:, 18:20] = 0
    kept, read_back = _stored(con, cur)
    np.testing.assert_array_equal(kept, A)
    assert not read_back
    cur.execute("DELETE FROM A WHERE i = 1000")  # none: nothing changes
    kept, read_back = _stored(con, cur)
    np.testing.assert_array_equal(kept, A)
    assert not read_back


def test_writes_in_a_row_keep_the_tensor_twice_then_leave_it_to_the_next_read(con):
    """A loop of INSERTs with no read between would copy the whole kept tensor at each: the third leaves it to
    the next scan. A DELETE reads the tensor (its query), so DELETEs and INSERTs in turns keep it."""
    cur = con.cursor()
    cur.execute("CREATE TENSOR A SHAPE (6, 4) TILE (2, 2)")
    expected = np.zeros((6, 4), dtype=np.float32)
    _stored(con, cur)  # kept, with no tile

    def insert(i, j, value):
        cur.execute("INSERT INTO A VALUES (?, ?, ?)", [i, j, np.full((2, 2), value)])
        expected[2 * i:2 * i + 2, 2 * j:2 * j + 2] = value

    insert(0, 0, 1.0)
    insert(0, 1, 2.0)
    kept, read_back = _stored(con, cur)
    np.testing.assert_array_equal(kept, expected)
    assert not read_back
    for i, j in [(1, 0), (1, 1), (2, 0)]:
        insert(i, j, 3.0 + i + j)
    kept, read_back = _stored(con, cur)
    np.testing.assert_array_equal(kept, expected)
    assert read_back
    for i in range(3):
        cur.execute(f"DELETE FROM A WHERE i = {i} AND j = 0")
        insert(i, 0, 10.0 + i)
    kept, read_back = _stored(con, cur)
    np.testing.assert_array_equal(kept, expected)
    assert not read_back


def test_a_write_keeps_its_stacks_and_gives_the_tiles_a_read_gives(con, monkeypatch):
    """An UPDATE of every tile in several write batches leaves its stacks in the buffer pool as they are (no
    view of each tile); asked for tiles, the pool gives what a read from DuckDB gives, and a partial UPDATE
    of those stacks keeps the right contents too."""
    from trdb.execution import column_batch
    from trdb.statements import materialize
    from trdb.storage import tile_store
    from trdb.storage.tile_runs import StackedTiles, TileRuns
    monkeypatch.setattr(column_batch, "COLUMN_BATCH_ROWS", 100)  # the scan's batches of 100 tuples ...
    monkeypatch.setattr(materialize, "CHUNK_BYTES", 4096)  # ... joined into write batches of 256 tiles of 2 x 2
    cur = con.cursor()
    A = np.random.default_rng(8).standard_normal((40, 60)).astype(np.float32)
    _loaded(cur, A)
    cur.execute("SET workers = 1")  # the scan's batches come in key order: each written stack is kept as it is
    cur.execute("UPDATE A SET v = v * 2")
    A *= 2
    session = con._session()
    meta = session.catalog.require_tensor("A")
    kept = session.catalog.pool.peek((meta.table, meta.version))
    assert isinstance(kept, StackedTiles) and len(kept.runs) > 1 and len(kept) == 600
    keys, tiles = session.catalog.tiles(meta)
    read_keys, read_tiles = tile_store.read_tiles(session.db, meta)
    np.testing.assert_array_equal(keys, read_keys)
    assert isinstance(tiles, TileRuns) and sum(len(stack) for _, stack in tiles.runs) == len(tiles) == 600
    for tile, read in zip(tiles, read_tiles):
        np.testing.assert_array_equal(tile, read)
        assert not tile.flags.writeable
    cur.execute("UPDATE A SET v = v + 1 WHERE i = 7")  # some tiles of several stacks: tile by tile
    A[14:16] += 1
    kept, read_back = _stored(con, cur)
    np.testing.assert_array_equal(kept, A)
    assert not read_back


def test_a_tensor_read_in_several_runs_keeps_its_deletes_and_updates_as_stacks(con, monkeypatch):
    """300,000 tiles come from DuckDB in several batches, so the pool keeps them in several runs: a DELETE and a
    partial UPDATE build the new contents from the runs joined (not tile by tile) and keep them."""
    from trdb.catalog import tile_access

    def one_by_one(kept):
        raise AssertionError("the kept tiles went tile by tile")
    monkeypatch.setattr(tile_access, "_listed", one_by_one)
    cur = con.cursor()
    A = np.random.default_rng(9).standard_normal((300_000, 2)).astype(np.float32)
    cur.execute("CREATE TENSOR A FROM ? TILE (1, 2)", [A])
    _pool(con).shrink(_pool(con).bytes)
    cur.execute("SELECT * FROM A").fetch_tensor()
    catalog = con._session().catalog
    meta = catalog.require_tensor("A")
    kept = _pool(con).peek((meta.table, meta.version))
    runs = kept.runs if hasattr(kept, "runs") else kept[1].runs
    assert len(runs) > 1
    cur.execute("DELETE FROM A WHERE A.i % 3 = 0")
    A[::3] = 0
    cur.execute("UPDATE A SET v = A.v * 2 WHERE A.i < 1000")
    A[:1000] *= 2
    kept, read_back = _stored(con, cur)
    np.testing.assert_array_equal(kept, A)
    assert not read_back
