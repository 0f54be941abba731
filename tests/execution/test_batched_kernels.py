"""Kernels with per-tile reductions inside (SUMSQ, REDUCE_* along an axis, SOFTMAX, RESHAPE, TRANSPOSE, MATMUL of
small tiles) run on a batch's stacked tiles: the same values as numpy, one kernel call a batch, not one a tuple."""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from trdb.catalog.functions import FUNCTIONS
from trdb.execution.tile_math import batched_kernels

ROWS = 1003  # 1003 x 8 in tiles of 4 x 8: an edge tile of 3 rows at the end


@pytest.fixture
def tiles(cur):
    rng = np.random.default_rng(4)
    values = rng.standard_normal((ROWS, 8))
    cur.execute("CREATE TENSOR T FROM ? TILE (4, 8) DTYPE float64", [values])
    cur.execute("CREATE TENSOR F FROM ? TILE (4, 8)", [values.astype(np.float32)])
    return cur, values


def per_tile(values: np.ndarray) -> list[np.ndarray]:
    return [values[start:start + 4] for start in range(0, ROWS, 4)]


@pytest.mark.parametrize("query,expected", [
    ("SELECT SUM(1 + SUMSQ(T.v)) FROM T", lambda t: sum(1 + (b ** 2).sum() for b in t)),
    ("SELECT SUM(RELU(SUMSQ(T.v) - 30)) FROM T", lambda t: sum(max((b ** 2).sum() - 30, 0) for b in t)),
    ("SELECT SUM(REDUCE_SUM(REDUCE_SUM(SQUARE(T.v), 1))) FROM T", lambda t: sum((b ** 2).sum() for b in t)),
    ("SELECT SUM(REDUCE_SUM(REDUCE_MAX(T.v, 0) * 2)) FROM T", lambda t: sum(2 * b.max(0).sum() for b in t)),
    ("SELECT SUM(REDUCE_SUM(REDUCE_MEAN(T.v, -1) + SUMSQ(T.v))) FROM T",
     lambda t: sum((b.mean(-1) + (b ** 2).sum()).sum() for b in t)),
    ("SELECT SUM(REDUCE_SUM(SOFTMAX(T.v, 1) * T.v)) FROM T",
     lambda t: sum((np.exp(b) / np.exp(b).sum(1, keepdims=True) * b).sum() for b in t)),
    ("SELECT SUM(SUMSQ(MATMUL(TRANSPOSE(T.v), T.v))) FROM T", lambda t: sum(((b.T @ b) ** 2).sum() for b in t))])
def test_reductions_inside_a_sum_match_numpy(tiles, query, expected):
    cur, values = tiles
    got = cur.execute(query).fetchone()[0]
    assert float(np.asarray(got)) == pytest.approx(expected(per_tile(values)), rel=1e-9)


def test_a_sum_of_reshaped_edge_tiles_is_the_error_a_tuple_gives(tiles):
    cur, _ = tiles
    with pytest.raises(trdb.DataError, match=r"SUM: tiles of one group have shapes \(16,\) and \(12,\)"):
        cur.execute("SELECT SUM(REDUCE_SUM(RESHAPE(T.v, (-1, 2)), 1) * 3) FROM T").fetchall()


def test_a_projection_with_reductions_gives_each_tuple_its_tile(tiles):
    cur, values = tiles
    got = cur.execute("SELECT T.i, T.j, T.v / RESHAPE(SUMSQ(T.v), (1, 1)) + SOFTMAX(T.v, 0) AS v FROM T"
                      ).fetch_tensor()
    expected = np.concatenate([b / (b ** 2).sum() + np.exp(b) / np.exp(b).sum(0) for b in per_tile(values)])
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-15)


def test_one_kernel_call_a_batch_not_a_tuple(tiles, monkeypatch):
    cur, values = tiles
    calls = []
    sumsq = FUNCTIONS["SUMSQ"]
    real = type(sumsq).call

    def counted(self, backend, args):
        calls.append(self.name)
        return real(self, backend, args)
    monkeypatch.setattr(type(sumsq), "call", counted)
    got = cur.execute("SELECT SUM(1 + SUMSQ(F.v)) FROM F").fetchone()[0]
    assert float(got) == pytest.approx(ROWS // 4 + 1 + (values.astype(np.float32) ** 2).sum(), rel=1e-5)
    assert calls.count("SUMSQ") <= 2  # the edge tile, alone, may go one by one; the 250 others are stacked


def test_integers_and_failures_go_tuple_by_tuple(cur):
    cur.execute("CREATE TENSOR I FROM ? TILE (2, 4)", [np.arange(400, dtype=np.int32).reshape(100, 4)])
    expected = sum(int((b.astype(np.int64) ** 2).sum()) for b in np.arange(400).reshape(50, 2, 4))
    assert int(cur.execute("SELECT SUM(1 + SUMSQ(I.v)) FROM I").fetchone()[0]) == expected + 50
    with pytest.raises(Exception, match="RESHAPE"):
        cur.execute("SELECT SUM(REDUCE_SUM(RESHAPE(I.v, (3, -1)))) FROM I").fetchall()


def test_what_has_no_stacked_form_compiles_to_none():
    from trdb.kernels.numpy_backend import NUMPY_BACKEND
    from trdb.plan import expressions as bx
    from trdb.plan.types import TensorType
    tile = TensorType(np.dtype("float64"), (4, 8), (4, 8))
    column = bx.ColumnIndex(0, tile)
    assert batched_kernels.compile_batched(bx.Const(np.ones((4, 8)), tile), NUMPY_BACKEND) is None
    assert batched_kernels.compile_batched(column, NUMPY_BACKEND) is not None
    assert batched_kernels.compile_batched(bx.ColumnIndex(1, None), NUMPY_BACKEND) is None


@pytest.mark.parametrize("cast,dtype", [("float32", np.float32), ("float64", np.float64)])
def test_a_cast_constant_is_stacked_as_a_number_of_its_dtype(tiles, monkeypatch, cast, dtype):
    """`CAST(2 AS float32)` folds to a 0-d array: the stacked kernels take it as each tuple's call does (its dtype
    promotes the float32 tiles as numpy promotes them), one call a batch."""
    cur, values = tiles
    calls = []
    kernel = type(FUNCTIONS["SUMSQ"])
    real = kernel.call
    monkeypatch.setattr(kernel, "call", lambda self, backend, args: calls.append(self.name) or real(self, backend, args))
    got = cur.execute(f"SELECT F.i, F.j, F.v * CAST(2 AS {cast}) + 1 AS v FROM F").fetch_tensor()
    expected = np.concatenate([b * np.asarray(2, dtype) + 1 for b in per_tile(values.astype(np.float32))])
    assert got.dtype == expected.dtype == dtype
    np.testing.assert_array_equal(got, expected)
    assert calls.count("*") < 10  # a call a batch (of each worker's share), not one for each of the 251 tuples
