"""Elementwise projections of many small tiles, stacked: the same results and errors as tuple by tuple."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import trdb
from trdb.execution.tile_math import stacked_tiles

FLOAT_EXPRESSIONS = [
    "A.v * 2 + 1",
    "RELU(A.v - B.v)",
    "EXP(A.v) / (1 + ABS(B.v))",
    "SIGMOID(A.v) * B.v - TANH(B.v)",
    "POWER(A.v, 2) + SQUARE(B.v)",
    "GREATEST(A.v, 0.5) - LEAST(B.v, -0.5)",
    "BCE_WITH_LOGITS(A.v, B.v)",
    "CAST(A.v > B.v AS float32) * A.v",
    "-A.v + ONES_LIKE(B.v)",
    "SQRT(ABS(A.v)) + LOG(1 + ABS(B.v))",
]


def _project(cur, expression: str, stacked: bool, monkeypatch) -> np.ndarray:
    monkeypatch.setattr(stacked_tiles, "MIN_STACKED", 16 if stacked else 10 ** 9)
    return cur.execute(f"SELECT A.i, A.j, {expression} AS v FROM A JOIN B ON A.i = B.i AND A.j = B.j").fetch_tensor()


@pytest.fixture
def tensors(cur):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 37, 10))  # tiles of 4 x 2: 45 full ones (stacked), 5 edge ones (one by one)
    cur.execute("CREATE TENSOR A FROM ? TILE (4, 2) DTYPE float32", [a])
    cur.execute("CREATE TENSOR B FROM ? TILE (4, 2) DTYPE float32", [b])
    return cur, a.astype(np.float32), b.astype(np.float32)


@pytest.mark.parametrize("expression", FLOAT_EXPRESSIONS)
def test_stacked_elementwise_projections_give_the_tuple_by_tuple_results(tensors, expression, monkeypatch):
    cur = tensors[0]
    calls = []
    real = stacked_tiles._evaluated
    monkeypatch.setattr(stacked_tiles, "_evaluated", lambda *args: calls.append(1) or real(*args))
    stacked = _project(cur, expression, True, monkeypatch)
    assert calls  # the full tiles went through the stacked path
    one_by_one = _project(cur, expression, False, monkeypatch)
    assert stacked.dtype == one_by_one.dtype
    np.testing.assert_array_equal(stacked, one_by_one)


def test_stacked_results_match_numpy_on_the_whole_arrays(tensors, monkeypatch):
    cur, a, b = tensors
    np.testing.assert_allclose(_project(cur, "RELU(A.v - B.v) * 3", True, monkeypatch), np.maximum(a - b, 0) * 3,
                               rtol=1e-6)


def test_integer_tiles_and_their_errors(cur, monkeypatch):
    values = np.arange(-200, 200, dtype=np.int64).reshape(40, 10)
    cur.execute("CREATE TENSOR A FROM ? TILE (4, 2)", [values])
    cur.execute("CREATE TENSOR B FROM ? TILE (4, 2)", [values % 7 + 1])
    for expression in ("A.v // B.v", "A.v % B.v", "A.v * B.v - 3", "CAST(A.v AS float64) / B.v"):
        np.testing.assert_array_equal(_project(cur, expression, True, monkeypatch),
                                      _project(cur, expression, False, monkeypatch))
    messages = []
    for stacked in (True, False):
        with pytest.raises(trdb.DataError) as info:
            _project(cur, "POWER(A.v, B.v - 3)", stacked, monkeypatch)
        messages.append(str(info.value))
    assert messages[0] == messages[1] and "negative integer powers" in messages[0]


def test_broadcast_tiles_and_csr_tiles_among_dense_ones(cur, monkeypatch):
    rng = np.random.default_rng(5)
    dense = rng.standard_normal((64, 64))
    dense[:32, :32] = np.where(rng.random((32, 32)) < 0.02, dense[:32, :32], 0)  # its tiles stored CSR
    cur.execute("CREATE TENSOR A FROM ? TILE (8, 8)", [dense])
    cur.execute("CREATE TENSOR B FROM ? TILE (8, 8)", [scipy.sparse.random(64, 64, 0.5, random_state=1).toarray()])
    cur.execute("CREATE TENSOR C FROM ? TILE (8, 1)", [rng.standard_normal((64, 1))])  # a column per row of tiles
    for expression in ("A.v * 2 - B.v", "EXP(A.v) + B.v"):
        np.testing.assert_array_equal(_project(cur, expression, True, monkeypatch),
                                      _project(cur, expression, False, monkeypatch))
    query = "SELECT A.i, A.j, A.v * C.v AS v FROM A JOIN C ON A.i = C.i"  # tiles (8, 8) * (8, 1)
    results = []
    for stacked in (True, False):
        monkeypatch.setattr(stacked_tiles, "MIN_STACKED", 16 if stacked else 10 ** 9)
        results.append(cur.execute(query).fetch_tensor())
    np.testing.assert_array_equal(results[0], results[1])


def test_explain_analyze_counts_the_same_work(tensors, monkeypatch):
    cur = tensors[0]
    query = "EXPLAIN ANALYZE SELECT A.i, A.j, A.v * 2 + B.v AS v FROM A JOIN B ON A.i = B.i AND A.j = B.j"
    totals = []
    for stacked in (True, False):
        monkeypatch.setattr(stacked_tiles, "MIN_STACKED", 16 if stacked else 10 ** 9)
        text = "\n".join(row[0] for row in cur.execute(query))
        totals.append([line for line in text.splitlines() if "executed" in line.lower() and "flops" in line.lower()])
    assert totals[0] == totals[1] and totals[0]


def test_tiles_of_fewer_dimensions_broadcast_as_tuple_by_tuple(cur, monkeypatch):
    # (16, 16) tiles times (16,) tiles broadcast per tuple; stacked as they come, sixteen of each would line
    # up wrongly: the (16,) tiles are stacked as (16, 1, 16)
    rng = np.random.default_rng(8)
    matrix, vector = rng.standard_normal((16, 256)), rng.standard_normal(256)
    cur.execute("CREATE TENSOR M FROM ? TILE (16, 16)", [matrix])
    cur.execute("CREATE TENSOR V FROM ? TILE (16)", [vector])
    cur.execute("SET workers = 1")  # all sixteen tuples in one batch
    query = "SELECT M.i, M.j, M.v * V.v AS v FROM M JOIN V ON M.j = V.i"
    monkeypatch.setattr(stacked_tiles, "MIN_STACKED", 16)
    np.testing.assert_allclose(cur.execute(query).fetch_tensor(), (matrix * vector).astype(np.float32), rtol=1e-6)


def test_a_gradient_of_many_small_tiles_stacks_its_0d_upstream(cur, monkeypatch):
    # d SUM(SUMSQ(W - T)) / dW = 2 (W - T) times the upstream 0-d tile: stacked with it, as tuple by tuple
    rng = np.random.default_rng(9)
    w, t = rng.standard_normal((2, 256, 3))
    cur.execute("CREATE TENSOR W FROM ? TILE (4, 3)", [w])
    cur.execute("CREATE TENSOR T FROM ? TILE (4, 3)", [t])
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(W.v - T.v)) AS v FROM W JOIN T ON W.i = T.i AND W.j = T.j")
    calls = []
    real, broadcastable = stacked_tiles._evaluated, stacked_tiles._broadcastable
    monkeypatch.setattr(stacked_tiles, "_evaluated", lambda *args: calls.append(1) or real(*args))
    # a column batch's stacks (execution/column_batch.py) broadcast the same way
    monkeypatch.setattr(stacked_tiles, "_broadcastable",
                        lambda batch, used, row: calls.append(2) or broadcastable(batch, used, row))
    gradients = []
    for stacked in (True, False):
        monkeypatch.setattr(stacked_tiles, "MIN_STACKED", 16 if stacked else 10 ** 9)
        gradients.append(cur.execute("SELECT * FROM GRAD(loss, W)").fetch_tensor())
    assert calls
    np.testing.assert_allclose(gradients[0], gradients[1], rtol=1e-6)
    np.testing.assert_allclose(gradients[0], 2 * (w - t).astype(np.float32), rtol=1e-6)
