"""Seeded random fills: each tile exactly as numpy.random.default_rng([seed, *key]) draws it, seeds hashed in runs."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from trdb.ingest import fill
from trdb.ingest.tile_seeds import generator_at, pcg64_states
from trdb.storage.tensor_meta import TensorMeta


@pytest.mark.parametrize("seed", [0, 3, 2 ** 31, 2 ** 32 + 5, 2 ** 62 + 17, (1 << 63) - 1])
def test_the_states_are_those_default_rng_starts_from(seed):
    rng = np.random.default_rng(seed % 1000)
    keys = np.concatenate([np.zeros((1, 3), np.int64), [[2 ** 32 - 1, 0, 1]], rng.integers(0, 2 ** 32, (30, 3))])
    generator = np.random.Generator(np.random.PCG64())
    for key, state in zip(keys.tolist(), pcg64_states(seed, keys)):
        drawn = generator_at(generator, state).standard_normal(5)
        np.testing.assert_array_equal(drawn, np.random.default_rng([seed, *key]).standard_normal(5))
    assert pcg64_states(seed, np.array([[2 ** 32, 0, 0]])) is None  # a key of two words: numpy's own seeding


def _per_key(shape, tile, seed, draw) -> np.ndarray:
    out = np.zeros(shape, np.float32)
    grid = [-(-n // t) for n, t in zip(shape, tile)]
    for key in itertools.product(*map(range, grid)):
        where = tuple(slice(k * t, min((k + 1) * t, n)) for k, t, n in zip(key, tile, shape))
        out[where] = draw(np.random.default_rng([seed, *key]), tuple(s.stop - s.start for s in where))
    return out


def test_a_seeded_fill_draws_each_tile_from_its_key(cur):
    cur.execute("CREATE TENSOR N SHAPE (40, 3, 5) TILE (8, 2, 2) FILL RANDOM_NORMAL(-1, 0.5, 3)")  # edge tiles
    cur.execute("CREATE TENSOR U SHAPE (33, 7) TILE (4, 4) FILL RANDOM_UNIFORM(2, 3, 2)")
    normal = _per_key((40, 3, 5), (8, 2, 2), 3,
                      lambda g, s: (g.standard_normal(s, dtype=np.float64) * 0.5 - 1).astype(np.float32))
    uniform = _per_key((33, 7), (4, 4), 2, lambda g, s: g.uniform(2, 3, s).astype(np.float32))
    np.testing.assert_array_equal(cur.execute("SELECT * FROM N").fetch_tensor(), normal)
    np.testing.assert_array_equal(cur.execute("SELECT * FROM U").fetch_tensor(), uniform)


def test_keys_asked_out_of_grid_order_still_get_their_own_values():
    meta = TensorMeta("R", ["i", "j"], "v", np.dtype("float32"), (12, 12), (4, 4), "")
    make = fill.fill_maker(meta, "RANDOM_NORMAL", [0, 1, 9])
    for key in [(2, 1), (0, 0), (0, 1), (1, 0), (0, 0)]:
        expected = np.random.default_rng([9, *key]).standard_normal((4, 4), dtype=np.float64).astype(np.float32)
        np.testing.assert_array_equal(make(key), expected)
