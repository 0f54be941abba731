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
