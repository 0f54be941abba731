"""DenseEinsumExec's row blocks: whole row tiles, several a thread, taken in turn by the threads (one that
falls behind takes fewer), each on one BLAS thread; a block's failure raised once all have ended, BLAS's
threads given back."""
from __future__ import annotations

import threading

import pytest

from trdb.execution import work
from trdb.execution.operators.dense_einsum import in_turns, row_blocks
from trdb.execution.workers import _BLAS
from trdb.optimizer.physical.scans import block_rows_of


@pytest.mark.parametrize("row_tiles, tile, blocks, expected", [
    (3, 128, 2, 256),     # 3 row tiles into at most 2 blocks: 2 tiles a block
    (3, 128, 8, 128),     # never more blocks than row tiles
    (8, 1024, 8, 1024),   # the MLP's X on 2 threads, 4 blocks each: one row tile a block
    (64, 128, 8, 1024),
    (1, 128, 8, 128),     # one row tile: one block
])
def test_a_block_is_whole_row_tiles_as_even_as_they_go(row_tiles, tile, blocks, expected):
    assert block_rows_of(row_tiles, tile, blocks) == expected


@pytest.mark.parametrize("rows, block_rows, expected", [
    (300, 256, [(0, 256), (256, 300)]),   # the last block shorter: an edge tile
    (300, 128, [(0, 128), (128, 256), (256, 300)]),
    (8192, 1024, [(n * 1024, (n + 1) * 1024) for n in range(8)]),
    (100, 128, [(0, 100)]),
])
def test_row_blocks_cover_the_rows_in_order(rows, block_rows, expected):
    assert [(s.start, s.stop) for s in row_blocks(rows, block_rows)] == expected


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
        parts = in_turns(run, [slice(0, 1), slice(1, 2), slice(2, 3)])
    finally:
        work.swap(previous)
    assert parts == [0, 1, 2] and sorted(start for start, _ in seen) == [0, 1, 2]
    assert all(threads == [1] * len(_BLAS) for _, threads in seen)
    assert (counted.flops, counted.bytes) == (30, 300)
    assert [blas.get_num_threads() for blas in _BLAS] == before


def test_a_thread_held_up_takes_fewer_blocks_and_each_block_runs_once():
    """Block 0 does not end until the seven others have begun: the other thread must take them all, one
    after another (two halves of four blocks each would wait for ever, and the timeout fails the test)."""
    bounds = [slice(n, n + 1) for n in range(8)]
    others_begun, lock, runs = threading.Event(), threading.Lock(), []

    def run(rows: slice):
        with lock:
            runs.append((rows.start, threading.get_ident()))
            if sum(1 for start, _ in runs if start != 0) == len(bounds) - 1:
                others_begun.set()
        if rows.start == 0:
            assert others_begun.wait(timeout=30), "the other thread did not take the remaining blocks"
        return rows.start * 10

    parts = in_turns(run, bounds, threads=2)
    assert parts == [n * 10 for n in range(8)]
    assert sorted(start for start, _ in runs) == list(range(8))
    held = next(thread for start, thread in runs if start == 0)
    assert [start for start, thread in runs if thread == held] == [0]
    assert len({thread for _, thread in runs}) == 2


def test_a_failing_block_raises_after_the_others_end_and_gives_blas_back():
    begun, ended, before = [], [], [blas.get_num_threads() for blas in _BLAS]

    def run(rows: slice):
        begun.append(rows.start)
        if rows.start == 1:
            raise MemoryError("block 1")
        threading.Event().wait(0.05)
        ended.append(rows.start)

    with pytest.raises(MemoryError, match="block 1"):
        in_turns(run, [slice(0, 1), slice(1, 2), slice(2, 3)])
    assert 1 in begun and sorted(ended) == sorted(set(begun) - {1})  # every block begun had ended when it was raised
    assert [blas.get_num_threads() for blas in _BLAS] == before


def test_after_a_failure_no_block_is_begun():
    begun = []

    def run(rows: slice):
        begun.append(rows.start)
        if rows.start == 0:
            raise MemoryError("block 0")

    with pytest.raises(MemoryError, match="block 0"):
        in_turns(run, [slice(n, n + 1) for n in range(6)], threads=1)
    assert begun == [0]
