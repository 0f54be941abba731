"""A result's tiles checked a batch at a time (key range, repeats, shape, dtype) report the error the first
failing tile gives when the tiles are checked one by one, and pass exactly the batches that pass one by one;
the TileWriter takes a batch of tiles in the same write batches as one tile at a time."""
from __future__ import annotations

import numpy as np
import pytest

from trdb.errors import DataError, IntegrityError
from trdb.statements.materialize import _check_each, check_stack, check_tiles, key_positions
from trdb.storage import tile_store
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_writer import TileWriter

META = TensorMeta("T", ["i", "j"], "v", np.dtype("float32"), (10, 7), (4, 3), "t")  # 3 x 3 tiles, edges smaller


def _good(key):
    return np.ones(META.tile_shape_at(key), dtype=np.float32)


def _defective(rng, keys, tiles, kind):
    """A defect put in at a random place: a key out of range or repeated, a tile of another shape, rank or
    dtype (kind 6: none)."""
    where = int(rng.integers(len(keys)))
    if kind == 0:
        keys[where] = (3, 0)
    elif kind == 1:
        keys[where] = (-1, 2)
    elif kind == 2:  # a repeat, somewhere after the key it repeats
        later = int(rng.integers(where + 1, len(keys) + 1))
        keys.insert(later, keys[where])
        tiles.insert(later, _good(keys[where]))
    elif kind == 3:
        tiles[where] = np.ones((4, 3), dtype=np.float32) if keys[where][0] == 2 else np.ones((1, 3), np.float32)
    elif kind == 4:
        tiles[where] = np.ones((4,), dtype=np.float32)
    elif kind == 5:
        tiles[where] = tiles[where].astype(np.complex64)
    return keys, tiles


def _positions(keys) -> list:
    """Each key's place in the grid (out of it: clipped in, as check_tiles's range check fails them first)."""
    return key_positions(META, np.array([tuple(k) for k in keys], dtype=np.int64).reshape(len(keys), 2))


def _seen(keys) -> set:
    return set(_positions(sorted(keys)))


def _outcome(check):
    try:
        return "ok", check()
    except (DataError, IntegrityError) as exc:
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("seed", range(140))
def test_a_batch_fails_as_its_first_failing_tile_does_one_by_one(seed):
    rng = np.random.default_rng(seed)
    every = [(i, j) for i in range(3) for j in range(3)]
    earlier = {every[k] for k in rng.choice(9, size=int(rng.integers(0, 3)), replace=False)}
    keys = [every[k] for k in rng.permutation(9)[:int(rng.integers(1, 9))] if every[k] not in earlier]
    if not keys:
        keys = [k for k in every if k not in earlier][:1]
    keys, tiles = list(keys), [_good(k) for k in keys]
    for kind in (seed % 7, *rng.integers(7, size=int(rng.integers(2)))):  # one or two defects
        keys, tiles = _defective(rng, keys, tiles, kind)
    seen = _seen(earlier)
    batch = _outcome(lambda: check_tiles(META, np.array(keys, dtype=np.int64), list(tiles), "W", set(seen)))
    alone = _outcome(lambda: _check_each(META, [tuple(k) for k in keys], _positions(keys), list(tiles), "W",
                                         set(seen)))
    assert batch[0] == alone[0] or (batch[0] == "ok" and alone[0] == "ok")
    if alone[0] != "ok":
        assert batch[1] == alone[1]
    else:
        assert all(t.dtype == META.dtype for t in batch[1])


def test_seen_keys_grow_across_batches_and_a_later_repeat_fails():
    seen: set = set()
    check_tiles(META, np.array([(0, 0), (0, 1)]), [_good((0, 0)), _good((0, 1))], "W", seen)
    assert seen == _seen({(0, 0), (0, 1)})
    with pytest.raises(IntegrityError, match=r"key \(0, 1\) occurs more than once"):
        check_tiles(META, np.array([(1, 1), (0, 1)]), [_good((1, 1)), _good((0, 1))], "W", seen)


def test_tiles_are_cast_to_the_tensor_dtype_only_where_they_differ():
    same, other = _good((0, 0)), np.ones((4, 3), dtype=np.float64)
    checked = check_tiles(META, np.array([(0, 0), (0, 1)]), [same, other], "W")
    assert checked[0] is same and checked[1].dtype == np.float32


def test_a_0d_tensor_takes_one_tile_and_refuses_a_second():
    meta = TensorMeta("S", [], "v", np.dtype("float64"), (), (), "s")
    assert len(check_tiles(meta, np.zeros((1, 0), dtype=np.int64), [np.float64(2.0)], "W")) == 1
    with pytest.raises(IntegrityError, match="occurs more than once"):
        check_tiles(meta, np.zeros((2, 0), dtype=np.int64), [np.float64(1.0), np.float64(2.0)], "W")


@pytest.mark.parametrize("batch_bytes", [10_000, 100_000, 16 << 20])  # the last: the tile count bounds
def test_add_all_makes_the_batches_that_adding_one_by_one_makes(con, monkeypatch, batch_bytes):
    session = con._live
    made: dict[str, list] = {"one by one": [], "all at once": []}
    meta = session.catalog.create_tensor(TensorMeta("W", ["i"], "v", np.dtype("float64"), (400_000,), (16,), ""))
    keys = np.arange(20_000).reshape(-1, 1)
    tiles = [np.full(16, k, dtype=np.float64) for k in range(20_000)]
    tiles[7] = np.ones(4000)  # one large tile in the way
    for how in made:
        monkeypatch.setattr(tile_store, "write_tiles", lambda db, m, k, t, s=None, o=False, how=how: made[how].append(
            [tuple(x) for x in k.tolist()]) or len(t))
        with TileWriter(session.db, meta, batch_bytes) as writer:
            if how == "one by one":
                for key, tile in zip(keys.tolist(), tiles):
                    writer.add(tuple(key), tile)
            else:
                writer.add_all(keys, tiles)
    assert made["all at once"] == made["one by one"]
    assert len(made["one by one"]) > 1


def test_add_all_under_a_short_budget_still_writes_every_tile(con):
    con.execute("SET memory_limit = '16KB'")
    session = con._live
    meta = session.catalog.create_tensor(TensorMeta("W", ["i"], "v", np.dtype("float64"), (4000,), (16,), ""))
    tiles = [np.full(16, k, dtype=np.float64) for k in range(250)]
    with TileWriter(session.db, meta) as writer:
        writer.add_all(np.arange(250).reshape(-1, 1), tiles)
    session.catalog.refresh_statistics(meta)
    assert writer.batches > 1
    np.testing.assert_array_equal(con.execute("SELECT * FROM W").fetch_tensor(), np.repeat(np.arange(250.0), 16))


def test_add_cast_writes_every_tile_cast_a_run_at_a_time(con, monkeypatch):
    from trdb.storage import tile_writer

    monkeypatch.setattr(tile_writer, "STREAM_RUN", 7)
    session = con._live
    meta = session.catalog.create_tensor(TensorMeta("W", ["i"], "v", np.dtype("float64"), (800,), (16,), ""))
    tiles = [np.full(16, k + 0.5, dtype=np.float32) for k in range(50)]
    runs, kept = [], []
    real = TileWriter.add_all
    monkeypatch.setattr(TileWriter, "add_all", lambda self, k, t: runs.append(len(t)) or real(self, k, t))
    with TileWriter(session.db, meta) as writer:
        writer.add_cast(np.arange(50).reshape(-1, 1), tiles, meta.dtype, kept)
    session.catalog.refresh_statistics(meta)
    assert runs == [7] * 7 + [1]
    assert [t.dtype for t in kept] == [np.dtype("float64")] * 50
    assert all(np.array_equal(a, b) for a, b in zip(kept, tiles))
    np.testing.assert_array_equal(con.execute("SELECT * FROM W").fetch_tensor(), np.repeat(np.arange(50) + 0.5, 16))


def test_a_stack_is_checked_as_its_tiles_are():
    keys = np.array([(0, 0), (0, 1), (1, 0)], dtype=np.int64)
    stack = np.ones((3, 4, 3), np.float64)
    seen: set = set()
    got = check_stack(META, keys, stack, "W", seen)
    assert got.dtype == META.dtype and got.shape == stack.shape and seen == _seen({(0, 0), (0, 1), (1, 0)})
    with pytest.raises(IntegrityError, match=r"key \(0, 1\) occurs more than once"):
        check_stack(META, np.array([(1, 1), (0, 1)]), np.ones((2, 4, 3), np.float32), "W", seen)
    with pytest.raises(DataError, match="has shape"):  # (2, 2) is an edge tile: (2, 1)
        check_stack(META, np.array([(2, 2)]), np.ones((1, 4, 3), np.float32), "W", set())
    with pytest.raises(DataError, match="outside the tile grid"):
        check_stack(META, np.array([(3, 0)]), np.ones((1, 4, 3), np.float32), "W", set())


@pytest.mark.parametrize("marks", [True, False])
def test_written_keys_catch_repeats_across_stacks_and_tiles_as_a_set_does(monkeypatch, marks):
    """A write's keys (statements/written_keys.py) marked in a grid array, or in a set for a grid too large:
    a key repeated within a stack (in order or not), in a later stack, or between stacks and tiles fails
    with the error a set of keys gives."""
    from trdb.statements import written_keys
    if not marks:
        monkeypatch.setattr(written_keys, "MAX_MARKS", 4)
    meta = TensorMeta("T", ["i", "j"], "v", np.dtype("float32"), (24, 18), (4, 3), "t")  # 6 x 6 whole tiles

    def stack(keys):
        return check_stack(meta, np.array(keys), np.ones((len(keys), 4, 3), np.float32), "W", seen)

    seen = written_keys.WrittenKeys(meta.grid)
    assert seen.marks is marks and not seen
    stack([(0, 0), (0, 1)])
    check_tiles(meta, np.array([(1, 0)]), [np.ones((4, 3), np.float32)], "W", seen)
    stack([(5, 5)])
    written = {(0, 0), (0, 1), (1, 0), (5, 5)}
    assert seen and all((int(np.ravel_multi_index(k, meta.grid)) in seen) == (k in written)
                        for k in np.ndindex(*meta.grid))
    for keys in ([(2, 0), (0, 1)], [(3, 0), (1, 0)]):  # written before by a stack, by a tile
        with pytest.raises(IntegrityError, match=rf"key \({keys[1][0]}, {keys[1][1]}\) occurs more than once"):
            stack(keys)
    with pytest.raises(IntegrityError, match=r"key \(5, 5\) occurs more than once"):
        check_tiles(meta, np.array([(5, 5)]), [np.ones((4, 3), np.float32)], "W", seen)
    for keys in ([(2, 0), (2, 0)], [(2, 1), (2, 0), (2, 1)]):  # repeated within one stack, in order or not
        seen = written_keys.WrittenKeys(meta.grid)
        with pytest.raises(IntegrityError, match=r"occurs more than once"):
            stack(keys)


def test_an_insert_of_a_query_with_a_repeated_key_fails_and_writes_nothing():
    import trdb
    con = trdb.connect()
    con.execute("CREATE TENSOR A FROM ? TILE (1, 4)", [np.arange(400, dtype=np.float32).reshape(100, 4)])
    con.execute("CREATE TENSOR B SHAPE (100, 4) TILE (1, 4) DTYPE float32")
    with pytest.raises(trdb.IntegrityError, match="occurs more than once"):
        con.execute("INSERT INTO B SELECT A.i // 2 AS i, A.j, A.v FROM A")
    assert con.execute("SELECT COUNT(*) FROM B").fetchone() == (0,)
    con.execute("INSERT INTO B SELECT A.i, A.j, A.v * 2 AS v FROM A")
    np.testing.assert_array_equal(con.execute("SELECT * FROM B").fetch_tensor(),
                                  np.arange(400, dtype=np.float32).reshape(100, 4) * 2)
