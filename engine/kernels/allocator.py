"""glibc malloc tuned for tiles: freed tile memory is kept for the next tile, not returned to the OS.

By default glibc serves blocks over 128 KiB (raised as they are freed) with fresh mmap()s and
gives freed memory at the top of the heap back to the OS. A query allocates and frees tiles of
hundreds of KiB to tens of MiB all the time, so each new tile page-faults its memory back in: for a
4096 x 64 float32 result that costs more than the matrix products that made it. With blocks up to
32 MiB served from the heap and up to 1 GiB of free memory kept (an eighth of the machine's memory
where that is less), tiles reuse warm pages: a GCN epoch at ogbn-arxiv's size, whose live tiles of
21 MB add up past a GiB, took 1.57 s a step with 128 MiB kept (its ReLUs page-faulting 41 ms a tile)
and 1.32 s with 1 GiB, at 5% more peak memory. The process keeps that much free memory after a query.
Worker threads share that one heap (one arena): glibc would give each thread an arena of its own, whose
heaps go back to the OS as soon as they are empty whatever the trim threshold says, so the tiles a
worker makes page-fault again at every statement (an MLP gradient in 1024 x 512 tiles: 7,000-9,000 page
faults a statement with per-thread arenas, 300-800 with one, about 5 ms less). glibc fixes a thread's
arena at its first allocation, so this module tunes malloc when it is imported, which the trdb package
does first, before DuckDB starts its threads.
A user who set MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or MALLOC_ARENA_MAX keeps their choice.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD = 32 << 20   # glibc's maximum on 64-bit
TRIM_THRESHOLD = 1 << 30  # at most an eighth of the machine's memory (trim_threshold)

_tuned = False


def tune_allocator() -> bool:
    """Apply the settings once per process; False where the C library is not glibc."""
    global _tuned
    if _tuned:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    if "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        mallopt(M_TRIM_THRESHOLD, trim_threshold())
    if "MALLOC_ARENA_MAX" not in os.environ:
        mallopt(M_ARENA_MAX, 1)
    _tuned = True
    return True


def trim_threshold() -> int:
    """The free memory malloc keeps: TRIM_THRESHOLD, or an eighth of the machine's memory where that is less."""
    try:
        machine = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 128 << 20
    return int(min(TRIM_THRESHOLD, max(machine // 8, 128 << 20)))


tune_allocator()  # at import: before any thread allocates (see the module's docstring)
