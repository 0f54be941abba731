"""Reductions along a short last axis (kernels/axis_reductions.py) give numpy's values, dtypes and shapes."""
from __future__ import annotations

import numpy as np
import pytest

from trdb.kernels import axis_reductions as R
from trdb.kernels import functions as K

REDUCTIONS = [(R.axis_sum, np.sum), (R.axis_max, np.max), (R.axis_mean, np.mean)]


def _values(shape, dtype) -> np.ndarray:
    rng = np.random.default_rng(7)
    if np.dtype(dtype).kind == "b":
        return rng.random(shape) < 0.5
    return (rng.standard_normal(shape) * 10).astype(dtype)


@pytest.mark.parametrize("ours, numpys", REDUCTIONS)
@pytest.mark.parametrize("shape, axis", [((2708, 7), 1), ((2708, 7), -1), ((5, 300, 3), 2), ((1797, 10), -1),
                                         ((100, 32), 1),                        # the longest axis moved
                                         ((100, 40), 1), ((10, 7), 1),          # kept: long axis, few rows
                                         ((2708, 7), 0), ((2708, 7), None)])    # kept: not the last axis
@pytest.mark.parametrize("keepdims", [False, True])
def test_the_values_shapes_and_dtypes_of_numpys_functions(ours, numpys, shape, axis, keepdims):
    a = _values(shape, np.float32)
    got, expected = ours(np, a, axis, keepdims=keepdims), numpys(a, axis=axis, keepdims=keepdims)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.float16, np.float64, np.bool_])
@pytest.mark.parametrize("ours, numpys", REDUCTIONS)
def test_dtype_rules_are_numpys(dtype, ours, numpys):
    """int8 sums promote to the platform integer, float16 means accumulate wider, booleans sum to counts."""
    a = _values((500, 6), dtype)
    got, expected = ours(np, a, -1), numpys(a, axis=-1)
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=1e-3)


def test_the_short_axis_is_reduced_over_a_transposed_copy(monkeypatch):
    """The path is taken (a reduction over axis 0 of a classes-first copy) and leaves its argument alone."""
    a = _values((2708, 7), np.float32)
    before = a.copy()
    seen = []
    original = np.ascontiguousarray
    monkeypatch.setattr(np, "ascontiguousarray", lambda x, *args, **kw: seen.append(x.shape) or original(x, *args, **kw))
    R.axis_max(np, a, -1)
    assert seen == [(7, 2708)]
    np.testing.assert_array_equal(a, before)


def test_nan_and_inf_propagate_as_in_numpy():
    a = _values((300, 5), np.float64)
    a[3, 2], a[10, 0], a[11, 4] = np.nan, np.inf, -np.inf
    for ours, numpys in REDUCTIONS:
        np.testing.assert_array_equal(ours(np, a, -1), numpys(a, axis=-1))


@pytest.mark.parametrize("classes", [3, 7, 40])
def test_softmax_family_matches_the_textbook_formulas(classes):
    """SOFTMAX, LOG_SOFTMAX and CROSS_ENTROPY over a few classes of many rows: float64 textbook values."""
    z = _values((2708, classes), np.float32) / 4
    labels = np.random.default_rng(3).integers(0, classes, 2708)
    z64 = z.astype(np.float64)
    log_p = z64 - z64.max(axis=1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(K.softmax(np, z, -1), np.exp(log_p), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(K.log_softmax(np, z, 1), log_p, rtol=1e-5, atol=1e-5)
    picked = -log_p[np.arange(2708), labels]
    np.testing.assert_allclose(K.cross_entropy(np, z, labels, -1), picked, rtol=1e-5, atol=1e-6)
    one_hot = np.eye(classes, dtype=np.float32)[labels]
    np.testing.assert_allclose(K.cross_entropy(np, z, one_hot, -1), picked, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(K.reduce_sum(np, z, 1), z64.sum(axis=1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("shape", [(0, 2), (1, 1), (5, 0), (200, 2), (1000, 3), (7, 5)])
def test_row_any_and_all_are_numpys(shape):
    mask = np.random.default_rng(sum(shape)).random(shape) < 0.4
    np.testing.assert_array_equal(R.any_in_rows(mask), mask.any(axis=1))
    np.testing.assert_array_equal(R.all_in_rows(mask), mask.all(axis=1))
    np.testing.assert_array_equal(R.all_in_rows(~mask | mask), np.ones(shape[0], dtype=bool))
    assert R.any_in_rows(mask).dtype == bool and R.all_in_rows(mask).shape == (shape[0],)
