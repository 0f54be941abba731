"""SGD's and Adam's arithmetic (autodiff/update_rules.py) against the formulas of torch.optim, in numpy float64."""
from __future__ import annotations

import numpy as np

from trdb.autodiff.update_rules import adam_step, sgd_direction, sgd_stepped


def test_adam_step_is_torchs_adam_from_fresh_moments():
    rng = np.random.default_rng(1)
    grads = rng.standard_normal((5, 3, 4, 2))
    m = v = np.zeros((3, 4, 2))
    theta, reference = np.ones((3, 4, 2)), np.ones((3, 4, 2))
    rm = rv = np.zeros((3, 4, 2))
    for t, g in enumerate(grads, start=1):
        m, v, direction = adam_step(g, m, v, t, 0.9, 0.999, 1e-8)
        theta = theta - 0.01 * direction
        rm, rv = 0.9 * rm + 0.1 * g, 0.999 * rv + 0.001 * g ** 2
        reference = reference - 0.01 * (rm / (1 - 0.9 ** t)) / (np.sqrt(rv / (1 - 0.999 ** t)) + 1e-8)
    np.testing.assert_allclose(theta, reference, rtol=1e-12)
    np.testing.assert_allclose(m, rm, rtol=1e-12)


def test_sgd_steps_every_tile_in_its_own_precision():
    tiles = [np.full((2, 2), 1.0, np.float32), np.full((2, 2), 2.0, np.float32)]
    directions = [sgd_direction(np.full((2, 2), 0.5, np.float32), np.dtype(np.float32)) for _ in tiles]
    new = sgd_stepped(tiles, 0.1, directions)
    assert all(t.dtype == np.float32 for t in new)
    np.testing.assert_array_equal(new[0], tiles[0] - np.float32(0.1) * np.float32(0.5))
    np.testing.assert_array_equal(new[1], tiles[1] - np.float32(0.1) * np.float32(0.5))
    assert sgd_direction(np.ones(2, np.int32), np.dtype(np.int32)).dtype == np.float64
