"""Cutting a dense array into tiles: stacks of small tiles (one reshape a write batch), ragged edges, misfits."""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from trdb.ingest import tiling
from trdb.storage.tensor_meta import TensorMeta

CASES = [((64, 8), (8, 8)), ((65, 8), (8, 8)), ((30, 12, 6), (4, 3, 2)), ((1000, 64), (1, 64)), ((7,), (2,)),
         ((40, 9), (8, 3)), ((16, 10), (4, 5)), ((5, 4), (8, 8)), ((12, 13), (4, 4)), ((0, 4), (2, 2))]


@pytest.mark.parametrize("shape, tile", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_an_array_loads_tile_for_tile_as_numpy_cuts_it(cur, shape, tile, dtype):
    a = np.random.default_rng(1).standard_normal(shape)
    a[a < -0.5] = 0  # some all-zero tiles among them: they are stored too
    if dtype == "int32":
        a = (a * 100).round()
    cur.execute(f"CREATE TENSOR T FROM ? TILE ({', '.join(map(str, tile))}) DTYPE {dtype}", [a])
    np.testing.assert_array_equal(cur.execute("SELECT * FROM T").fetch_tensor(tuple(shape)), a.astype(dtype))
    grid = [-(-n // t) for n, t in zip(shape, tile)]
    keys = [f"k{d}" for d in range(len(shape))]
    rows = cur.execute(f"SELECT {', '.join(f'A.{c} AS {c}' for c in ('i', 'j', 'k')[:len(shape)])}, A.v AS v "
                       "FROM T AS A").fetchall() if keys else []
    assert len(rows) == int(np.prod(grid))  # every tile, zeros too
    for row in rows[:50]:
        where = tuple(slice(k * t, min((k + 1) * t, n)) for k, t, n in zip(row[:-1], tile, shape))
        np.testing.assert_array_equal(row[-1], a[where].astype(dtype))


def test_fewer_keys_than_axes(cur):
    a = np.random.default_rng(4).standard_normal((40, 8))
    cur.execute("CREATE TENSOR B (r) FROM ? TILE (16, 8)", [a])
    np.testing.assert_array_equal(cur.execute("SELECT * FROM B").fetch_tensor(), a)


def _meta(shape, tile, dtype="float32") -> TensorMeta:
    return TensorMeta(name="T", shape=tuple(shape), tile=tuple(tile), dtype=np.dtype(dtype),
                      keys=tuple("ijklm"[:len(shape)]), value_name="v", table="t")


def test_small_full_tiles_come_as_stacks_in_key_order():
    shape, tile = (24, 6, 4), (4, 3, 2)
    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    parts = list(tiling._array_tiles(_meta(shape, tile), a))
    assert all(isinstance(tiles, np.ndarray) for _, tiles in parts)
    keys = np.concatenate([np.asarray(k) for k, _ in parts])
    assert [tuple(k) for k in keys.tolist()] == list(np.ndindex(6, 2, 2))
    for key, stacked in zip(keys.tolist(), np.concatenate([t for _, t in parts])):
        np.testing.assert_array_equal(stacked, a[key[0] * 4:key[0] * 4 + 4, key[1] * 3:key[1] * 3 + 3,
                                              key[2] * 2:key[2] * 2 + 2])


def test_stacks_end_at_a_write_batch():
    a = np.ones((64, 8), np.float32)
    parts = list(tiling._array_tiles(_meta((64, 8), (2, 8)), a, 1024))
    assert len(parts) > 1 and all(t.nbytes <= 1024 for _, t in parts)
    assert sum(len(t) for _, t in parts) == 32


def test_a_value_that_does_not_fit_names_its_place_as_tile_by_tile_did(cur):
    a = np.ones((64, 4))
    a[37, 2], a[50, 1] = 1e300, 1e300
    with pytest.raises(trdb.DataError, match=r"the value 1e\+300 at \[37, 2\] does not fit in float32"):
        cur.execute("CREATE TENSOR T FROM ? TILE (4, 2) DTYPE float32", [a])
    with pytest.raises(trdb.ProgrammingError):
        cur.execute("SELECT * FROM T")  # the failed statement left nothing behind


def test_a_cancelled_load_stops_within_a_stack_of_small_tiles(cur, monkeypatch):
    """One stack can hold a million 1 x 1 tiles: it goes to the writer a batch at a time, and a cancelled statement
    stops at the next batch instead of after the whole stack (and leaves no tensor)."""
    from trdb.storage.tile_writer import TileWriter
    session, calls = cur.connection._session(), []
    add_stack = TileWriter.add_stack

    def first_batch_cancels(self, keys, stack):
        calls.append(len(stack))
        session.cancel()  # as Cursor.close() from another thread does, while the first batch is written
        return add_stack(self, keys, stack)
    monkeypatch.setattr(TileWriter, "add_stack", first_batch_cancels)
    with pytest.raises(trdb.OperationalError, match="cancelled"):
        cur.execute("CREATE TENSOR T FROM ? TILE (1, 1)", [np.ones((1, 100_000), np.float32)])
    assert calls == [tiling.STACK_TILES]
    monkeypatch.setattr(TileWriter, "add_stack", add_stack)
    with pytest.raises(trdb.ProgrammingError, match='"T" does not exist'):
        cur.execute("SELECT * FROM T")
