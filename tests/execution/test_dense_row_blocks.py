"""DenseEinsumExec's row blocks: whole row tiles split as evenly as they go, every block run at once on one
BLAS thread, a block's failure raised once all have ended, BLAS's threads given back."""
from __future__ import annotations

import threading

import pytest

from trdb.execution import work
from trdb.execution.operators.dense_einsum import in_row_blocks, row_blocks
from trdb.execution.workers import _BLAS


@pytest.mark.parametrize("rows, tile, blocks, expected", [
    (300, 128, 2, [(0, 256), (256, 300)]),          # 3 row tiles, the last an edge tile: 2 + 1
    (300, 128, 3, [(0, 128), (128, 256), (256, 300)]),
    (300, 128, 8, [(0, 128), (128, 256), (256, 300)]),  # never more blocks than row tiles
    (8192, 1024, 2, [(0, 4096), (4096, 8192)]),
    (100, 128, 2, [(0, 100)]),                      # one row tile: one block
])
def test_row_blocks_are_runs_of_whole_row_tiles(rows, tile, blocks, expected):
    assert [(s.start, s.stop) for s in row_blocks(rows, tile, blocks)] == expected


def test_every_block_runs_at_once_on_one_blas_thread_and_its_work_is_charged_here():
    met, seen, lock = threading.Barrier(3, timeout=10), [], threading.Lock()

    def run(rows: slice):
        met.wait()  # all three blocks are running at the same time, or this times out
        with lock:
            seen.append((rows.start, [blas.get_num_threads() for blas in _BLAS]))
        work.charge(10, 100)
        return rows.start

    counted = work.Work()
    before = [blas.get_num_threads() for blas in _BLAS]
    previous = work.swap(counted)
    try:
        parts = in_row_blocks(run, [slice(0, 1), slice(1, 2), slice(2, 3)])
    finally:
        work.swap(previous)
    assert parts == [0, 1, 2] and sorted(start for start, _ in seen) == [0, 1, 2]
    assert all(threads == [1] * len(_BLAS) for _, threads in seen)
    assert (counted.flops, counted.bytes) == (30, 300)
    assert [blas.get_num_threads() for blas in _BLAS] == before


def test_a_failing_block_raises_after_the_others_end_and_gives_blas_back():
    ended, before = [], [blas.get_num_threads() for blas in _BLAS]

    def run(rows: slice):
        if rows.start == 1:
            raise MemoryError("block 1")
        threading.Event().wait(0.05)
        ended.append(rows.start)

    with pytest.raises(MemoryError, match="block 1"):
        in_row_blocks(run, [slice(0, 1), slice(1, 2), slice(2, 3)])
    assert sorted(ended) == [0, 2]  # both other blocks had ended when it was raised
    assert [blas.get_num_threads() for blas in _BLAS] == before
