"""kernels/distinct.py against numpy's unique: the same values, in order, for any integer array."""
from __future__ import annotations

import numpy as np
import pytest

from trdb.kernels.distinct import all_distinct, distinct


@pytest.mark.parametrize("size, high", [(0, 5), (1, 5), (2, 1), (1000, 10), (1000, 10**12), (100_000, 50_000)])
def test_distinct_values_are_numpys_unique(size, high):
    values = np.random.default_rng(size).integers(-high, high, size)
    np.testing.assert_array_equal(distinct(values), np.unique(values))
    assert all_distinct(values) == (len(np.unique(values)) == size)


def test_rising_keys_and_repeats_anywhere():
    assert all_distinct(np.arange(10)) and all_distinct(np.array([3, 1, 2])) and all_distinct(np.zeros(0, np.int64))
    assert not all_distinct(np.array([1, 2, 2, 3])) and not all_distinct(np.array([5, 1, 5]))
    np.testing.assert_array_equal(distinct(np.array([[2, 1], [2, 7]])), [1, 2, 7])  # flattened, as numpy's
