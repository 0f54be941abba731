"""RETILE of dense tiles that fill their grid, as whole-array moves (tile_math/dense_retile.py), gives the tuples the
tile-by-tile cut gives, in the same order: edge tiles on either side, three axes, float32, two workers; a tensor with
an absent tile or CSR tiles goes tile by tile."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import trdb
from trdb.execution.operators import retile


def _retiled(monkeypatch, whole: bool, workers: int, array, tile, new, sparse=False) -> tuple[list, int]:
    taken = []
    real = retile.retiled
    monkeypatch.setattr(retile, "retiled", lambda *a: taken.append(real(*a) if whole else None) or taken[-1])
    with trdb.connect(workers=workers, min_parallel_cost=0) as con:
        source = scipy.sparse.csr_matrix(array) if sparse else array
        con.execute(f"CREATE TENSOR A FROM ? TILE {tile}", [source])
        rows = con.execute(f"SELECT * FROM RETILE(A, {new})").fetchall()
        con.execute(f"CREATE TENSOR B AS SELECT * FROM RETILE(A, {new})")
        back = con.execute("SELECT * FROM B").fetch_tensor()
    np.testing.assert_array_equal(back, array)
    monkeypatch.undo()
    return rows, sum(t is not None for t in taken)


CASES = [((23, 17), (4, 5), (6, 3)), ((23, 17), (4, 5), (1, 17)), ((23, 17), (23, 17), (1, 1)),
         ((40, 30), (8, 6), (20, 15)), ((1000,), (1,), (100,)), ((1000,), (100,), (1,)), ((6, 8, 10), (2, 4, 5), (3, 8, 2)),
         ((6, 8, 10), (6, 8, 10), (1, 1, 10))]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("shape, tile, new", CASES, ids=lambda c: "x".join(map(str, c)))
def test_whole_array_retile_matches_the_tile_by_tile_cut(monkeypatch, workers, shape, tile, new):
    array = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    fast, taken = _retiled(monkeypatch, True, workers, array, tile, new)
    slow, _ = _retiled(monkeypatch, False, workers, array, tile, new)
    assert taken > 0
    if workers > 1:  # each worker cuts its keys' tiles in order; the two hand them on as they come
        fast, slow = sorted(fast, key=lambda row: row[:-1]), sorted(slow, key=lambda row: row[:-1])
    assert [row[:-1] for row in fast] == [row[:-1] for row in slow]  # the same keys, in the same order
    for have, want in zip(fast, slow):
        assert have[-1].dtype == want[-1].dtype == np.float32
        np.testing.assert_array_equal(have[-1], want[-1])


def test_absent_and_csr_tiles_go_tile_by_tile(monkeypatch):
    array = np.zeros((20, 20), np.float32)
    array[:5, :5] = 1.0  # the tiles past it are all zeros: absent in a sparse tensor
    rows, taken = _retiled(monkeypatch, True, 1, array, (5, 5), (2, 2), sparse=True)
    assert taken == 0 and len(rows) == 9  # the new tiles that pieces of the one present tile make
