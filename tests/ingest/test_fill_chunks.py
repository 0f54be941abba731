"""A random FILL tile larger than one draw is drawn a chunk at a time: the same values as one draw, and a cancelled
statement stops within the tile (a FILL of large tiles took seconds a tile to notice)."""
import threading

import numpy as np
import pytest

from trdb.errors import QueryCancelled
from trdb.ingest import fill
from trdb.storage.tensor_meta import TensorMeta


def meta(dtype: str = "float32") -> TensorMeta:
    return TensorMeta("f", ("i", "j"), "v", np.dtype(dtype), (70, 50), (40, 30), "")


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "bool"])
@pytest.mark.parametrize("kind,args", [("RANDOM_NORMAL", [0, 2, 7]), ("RANDOM_UNIFORM", [-3, 5, 9])])
def test_a_tile_drawn_in_chunks_holds_the_values_of_one_draw(monkeypatch, dtype, kind, args):
    whole = {key: fill.fill_maker(meta(dtype), kind, args)(key) for key in [(0, 0), (1, 1), (0, 1)]}
    monkeypatch.setattr(fill, "DRAW_CHUNK", 97)  # chunks that end inside rows, and a short last one
    for key, tile in whole.items():
        chunked = fill.fill_maker(meta(dtype), kind, args)(key)
        assert chunked.dtype == tile.dtype and chunked.shape == tile.shape
        np.testing.assert_array_equal(chunked, tile)


def test_a_cancelled_fill_stops_inside_a_large_tile(monkeypatch):
    monkeypatch.setattr(fill, "DRAW_CHUNK", 100)
    interrupted = threading.Event()
    drawn = []
    at = fill._SeededGenerators.at

    class Counting:
        """The tile's generator, setting the statement's event as its third chunk is drawn."""

        def __init__(self, generator):
            self.generator = generator

        def standard_normal(self, size, dtype=np.float64):
            drawn.append(size)
            if len(drawn) == 3:
                interrupted.set()
            return self.generator.standard_normal(size, dtype=dtype)
    monkeypatch.setattr(fill._SeededGenerators, "at", lambda self, key: Counting(at(self, key)))
    make = fill.fill_maker(meta(), "RANDOM_NORMAL", [0, 1, 1], interrupted)
    with pytest.raises(QueryCancelled):
        make((0, 0))
    assert len(drawn) == 3  # stopped at the next chunk, not after the 12 a 40 x 30 tile takes
