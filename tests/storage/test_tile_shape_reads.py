"""A read checks and stacks its tiles by the shapes the keys give (TensorMeta.tile_shape_list's array)."""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from trdb.storage import tile_store
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_runs import MIN_RUN


def test_the_shape_array_is_the_list_of_shapes():
    """Whole tiles, edge tiles on both axes, a tile axis without a key, keys before and past the grid."""
    meta = TensorMeta("T", ("i", "j"), "v", np.dtype(np.float32), (10, 7, 5), (4, 3, 5), "")
    keys = np.array([[0, 0], [2, 0], [0, 2], [2, 2], [1, 1], [3, 0], [-1, 0], [0, 9], [2, 2]], dtype=np.int64)
    shapes = meta.tile_shape_list(keys)
    assert shapes == [meta.tile_shape_at(k) for k in keys.tolist()]
    np.testing.assert_array_equal(shapes.array, np.array(list(shapes), dtype=np.int64))
    assert shapes.array.dtype == np.int64 and shapes.array.shape == (len(keys), 3)


@pytest.mark.parametrize("shape, tile", [((7, 80), (2, 3)), ((64, 9), (2, 3)), ((3 * MIN_RUN + 1, 4), (1, 4))])
def test_a_read_of_many_small_tiles_with_edges_gives_numpys_tiles_in_runs_of_one_shape(shape, tile):
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    con = trdb.connect()
    con.execute(f"CREATE TENSOR T FROM ? TILE {tile}", [data])
    session = con._session()
    meta = session.catalog.require_tensor("T")
    keys, tiles = tile_store.read_tiles(session.db, meta)
    assert len(tiles) == meta.grid[0] * meta.grid[1]
    for key, got in zip(keys.tolist(), tiles):
        i, j = key
        np.testing.assert_array_equal(got, data[i * tile[0]:(i + 1) * tile[0], j * tile[1]:(j + 1) * tile[1]])
    _, stored_order = tile_store._read(session.db, meta, "")
    assert stored_order.runs, "a read of many small dense tiles stacks them"
    for start, stack in stored_order.runs:  # every run holds tiles of one shape, each the view of its row
        assert all(stored_order[start + r].shape == stack.shape[1:] for r in range(len(stack)))
        assert all(np.shares_memory(stored_order[start + r], stack) for r in range(len(stack)))
    con.close()


@pytest.mark.parametrize("shape, tile", [((40, 60), (2, 2)), ((41, 59), (2, 2))])
def test_tiles_stored_out_of_key_order_are_read_in_runs_of_one_shape(shape, tile):
    """A partial UPDATE and an INSERT store tiles after the others: a read sorts them by key and stacks them
    again (one run where all are of one shape), so that scans hand them on as column batches."""
    data = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    con = trdb.connect()
    con.execute(f"CREATE TENSOR T FROM ? TILE {tile}", [data])
    con.execute("UPDATE T SET v = v * 2 WHERE i = 3")
    con.execute("DELETE FROM T WHERE i = 5")
    con.execute("INSERT INTO T VALUES (5, 0, ?)", [np.ones(tile, dtype=np.float32)])
    data[6:8] *= 2
    data[10:12] = 0
    data[10:12, 0:2] = 1
    session = con._session()
    meta = session.catalog.require_tensor("T")
    stored_keys, _ = tile_store._read(session.db, meta, "")
    assert tile_store.key_order(stored_keys) is not None  # stored out of key order
    keys, tiles = tile_store.read_tiles(session.db, meta)
    assert tile_store.key_order(keys) is None
    for key, got in zip(keys.tolist(), tiles):
        i, j = key
        np.testing.assert_array_equal(got, data[i * tile[0]:(i + 1) * tile[0], j * tile[1]:(j + 1) * tile[1]])
    covered = sum(len(stack) for _, stack in tiles.runs)
    if shape[1] % tile[1] == 0 and shape[0] % tile[0] == 0:
        assert covered == len(tiles) and len(tiles.runs) == 1
    else:  # each row's edge tile ends a run
        assert covered >= len(tiles) - meta.grid[0] - meta.grid[1]
    for start, stack in tiles.runs:
        assert all(np.shares_memory(tiles[start + r], stack) for r in range(len(stack)))
    np.testing.assert_array_equal(con.execute("SELECT * FROM T").fetch_tensor(), data)
    con.close()


@pytest.mark.parametrize("shape, tile, stacked", [((40, 60), (2, 2), True), ((64, 9), (2, 3), True),
                                                 ((41, 59), (2, 2), False), ((7, 80), (2, 3), False)])
def test_a_whole_read_gives_its_stacks_where_every_tile_lies_in_one(shape, tile, stacked):
    """`read_stacks` gives the runs as they are (no view of each tile) where every tile lies in a run, and
    `read_tiles`' tiles otherwise (short runs of edge tiles); either way the tiles a read gives, in key order,
    also after tiles were stored out of key order."""
    from trdb.storage.tile_runs import StackedTiles
    data = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    con = trdb.connect()
    con.execute(f"CREATE TENSOR T FROM ? TILE {tile}", [data])
    session = con._session()
    for step in range(2):
        meta = session.catalog.require_tensor("T")
        read = tile_store.read_stacks(session.db, meta)
        assert isinstance(read, StackedTiles) == stacked
        if stacked:  # no view of each tile made yet; the runs cover every tile
            assert read._tiles is None and sum(len(stack) for _, stack in read.runs) == len(read)
        keys, tiles = read.tiles() if stacked else read
        expected_keys, expected = tile_store.read_tiles(session.db, meta)
        np.testing.assert_array_equal(keys, expected_keys)
        assert tile_store.key_order(keys) is None and len(tiles) == len(expected)
        for got, want in zip(tiles, expected):
            np.testing.assert_array_equal(got, want)
        con.execute("UPDATE T SET v = v + 1 WHERE i = 1")  # stored after the others: out of key order


def test_a_whole_read_of_sparse_tiles_gives_the_tiles():
    import scipy.sparse
    con = trdb.connect()
    con.execute("CREATE TENSOR S FROM ? TILE (20, 20)", [scipy.sparse.random(60, 60, density=0.01, format="csr",
                                                                            random_state=1, dtype=np.float32)])
    session = con._session()
    keys, tiles = tile_store.read_stacks(session.db, session.catalog.require_tensor("S"))
    assert len(tiles) == 9 and all(scipy.sparse.issparse(t) for t in tiles)


@pytest.mark.parametrize("side, restacked", [(8, True), (128, True), (160, False)])  # 64 KB: RESTACK_BYTES
def test_tiles_read_out_of_key_order_are_stacked_again_only_while_small(side, restacked):
    """Past RESTACK_BYTES a tile is a kernel call's worth on its own: a read reorders the views of its tiles."""
    from trdb.storage.tile_runs import TileRuns, tile_views
    stack = np.random.default_rng(side).standard_normal((4, side, side)).astype(np.float32)
    keys = np.array([[1, 0], [1, 1], [0, 0], [0, 1]], dtype=np.int64)  # stored after a partial UPDATE of row 0
    tiles = TileRuns(tile_views(stack), ((0, stack),))
    sorted_keys, got = tile_store.sorted_by_key(keys, tiles)
    np.testing.assert_array_equal(sorted_keys, keys[[2, 3, 0, 1]])
    for tile, want in zip(got, stack[[2, 3, 0, 1]]):
        np.testing.assert_array_equal(tile, want)
    assert bool(got.runs if isinstance(got, TileRuns) else ()) == restacked
    assert all(np.shares_memory(tile, stack) for tile in got) != restacked  # a copy, or the views themselves
