"""A tile's non-zeros (the statistics and the CSR rule read them) as numpy counts them, in chunks or not."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from trdb.kernels import sparse


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex64, np.int32, np.bool_])
@pytest.mark.parametrize("chunk", [3, sparse.ZERO_COUNT_CHUNK])
def test_as_numpy_counts_them(monkeypatch, dtype, chunk):
    monkeypatch.setattr(sparse, "ZERO_COUNT_CHUNK", chunk)
    rng = np.random.default_rng(5)
    for shape in [(), (0,), (7,), (4, 5), (2, 3, 4)]:
        tile = (rng.standard_normal(shape) * (rng.random(shape) < 0.5)).astype(dtype)
        if tile.dtype.kind == "f" and tile.size >= 3:
            tile.flat[:3] = [-0.0, np.nan, np.inf]  # -0.0 is a zero, NaN and inf are not
        for view in (tile, tile.T, tile[..., ::2] if tile.ndim else tile):
            assert sparse.count_nonzero(view) == np.count_nonzero(view)


def test_a_csr_tile_counts_its_stored_non_zeros_that_are_not_zero():
    tile = sp.csr_matrix(np.array([[0.0, 2.0], [3.0, 0.0]]))
    tile.data[0] = 0.0  # an explicit zero
    assert sparse.count_nonzero(tile) == 1
