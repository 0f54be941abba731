"""EINSUM tile sizes per index chosen by cost (optimizer/einsum_tiling.py)."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from trdb.optimizer.einsum_tiling import OperandTiling, candidates, choose_tiles

RNG = np.random.default_rng(11)


@pytest.fixture
def cur(con):
    """These tests are of the decomposition's tiles: no EINSUM runs on whole arrays (optimizer/whole_products.py);
    at two workers, as on CI's machine (how many tiles pay depends on how many workers share them)."""
    cursor = con.cursor()
    cursor.execute("SET dense_einsum_bytes = 0")
    cursor.execute("SET workers = 2")
    return cursor


def explain(cur, query):
    return "\n".join(r[0] for r in cur.execute("EXPLAIN " + query).fetchall())


def test_badly_tiled_matmul_is_retiled(cur):
    A, B = (RNG.standard_normal((512, 512)).astype(np.float32) for _ in range(2))
    cur.execute("CREATE TENSOR A FROM ? TILE (512, 2)", [A])
    cur.execute("CREATE TENSOR B FROM ? TILE (2, 512)", [B])
    query = "SELECT * FROM EINSUM('ij,jk->ik', A, B)"
    text = explain(cur, query)
    assert text.count("RetileExec([512, 2] -> ") == 1 and text.count("RetileExec([2, 512] -> ") == 1
    a_j = int(re.search(r"RetileExec\(\[512, 2\] -> \[\d+, (\d+)\]\)", text).group(1))
    assert a_j >= 256  # no longer 256 outer products joined on j: at most two tiles along j
    np.testing.assert_allclose(cur.execute(query).fetch_tensor(), A @ B, rtol=1e-4, atol=1e-3)


def test_agreeing_tiles_are_kept_when_retiling_does_not_pay(cur):
    A, B = RNG.standard_normal((64, 64)), RNG.standard_normal((64, 64))
    cur.execute("CREATE TENSOR A FROM ? TILE (32, 32) DTYPE float64", [A])
    cur.execute("CREATE TENSOR B FROM ? TILE (32, 32) DTYPE float64", [B])
    query = "SELECT * FROM EINSUM('ij,jk->ik', A, B)"
    assert "RetileExec" not in explain(cur, query)
    np.testing.assert_allclose(cur.execute(query).fetch_tensor(), A @ B, atol=1e-10)


def test_grad_through_einsum_with_agreeing_tiles(cur):
    A, B = RNG.standard_normal((40, 30)), RNG.standard_normal((30, 20))
    cur.execute("CREATE TENSOR A FROM ? TILE (20, 10) DTYPE float64", [A])
    cur.execute("CREATE TENSOR B FROM ? TILE (10, 20) DTYPE float64", [B])
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(E.v)) AS v FROM EINSUM('ij,jk->ik', A, B) AS E")
    cur.execute("SELECT * FROM GRAD(loss, B)")
    np.testing.assert_allclose(cur.fetch_tensor(shape=B.shape), 2 * A.T @ (A @ B), atol=1e-9)


def matmul_operands(tile_a, tile_b, density=1.0):
    return [OperandTiling("ij", tile_a, (True, True), density, 4), OperandTiling("jk", tile_b, (True, True), density, 4)]


def test_candidates_are_operand_tiles_whole_and_powers_of_two():
    operands = matmul_operands((2048, 8), (8, 1000))
    assert candidates("j", 2048, operands) == [8, 64, 128, 256, 512, 1024, 2048]
    assert candidates("k", 1000, operands) == [64, 128, 256, 512, 1000]
    assert candidates("i", 10, [OperandTiling("ij", (3, 2), (True, True), 1.0, 8)]) == [3, 10]


def test_workers_get_enough_tiles_to_share():
    sizes = {"i": 2048, "j": 2048, "k": 2048}
    start = {"i": 2048, "j": 2048, "k": 2048}
    operands = matmul_operands((2048, 2048), (2048, 2048))
    alone, _ = choose_tiles(operands, ["ij", "jk"], "ik", sizes, start, workers=1)
    assert alone == start  # one worker: one BLAS call over whole tiles, nothing retiled
    shared, _ = choose_tiles(operands, ["ij", "jk"], "ik", sizes, start, workers=4)
    grid = {c: math.ceil(sizes[c] / shared[c]) for c in sizes}
    assert max(grid["i"] * grid["k"], grid["j"]) >= 2  # some relational index splits the work


def test_sparse_operand_keeps_its_fine_tiles():
    sizes = {"i": 4096, "j": 4096, "k": 64}
    operands = [OperandTiling("ij", (256, 256), (True, True), 0.01, 4),
                OperandTiling("jk", (4096, 64), (True, True), 1.0, 4)]
    start = {"i": 256, "j": 256, "k": 64}
    tiles, _ = choose_tiles(operands, ["ij", "jk"], "ik", sizes, start, workers=1)
    assert tiles["i"] < 4096 and tiles["j"] < 4096  # whole tiles would make the 1% operand dense
