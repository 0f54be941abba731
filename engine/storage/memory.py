"""The memory manager: one budget (memory_limit) per database that caches and operators reserve bytes from.

Every holder of memory that grows with the data (the buffer pool, a hash join's build side, a hash
aggregate's groups, a sort's runs, a spool, a result buffer, a write batch) takes a `Reservation`
and asks it for bytes before it holds them. A request the budget cannot cover is first met by
shrinking caches (the buffer pool gives back its least recently used tensors); when that is not
enough it is refused, and the operator spills to disk instead of growing. Each reservation may
always hold its `minimum` (one tile and one kernel's working set), so every operator can make
progress however small the budget: the documented floor of memory use is a minimum per worker.
"""
from __future__ import annotations

import threading
from typing import Callable, Optional

DUCKDB_SHARE = 4                    # DuckDB's own memory limit: a quarter of the budget ...
DUCKDB_MIN, DUCKDB_MAX = 32 << 20, 4 << 30   # ... within these bounds (DuckDB needs its minimum however small
                                             # the budget: below 64 MB, DuckDB's 32 MB come on top of trdb's half)


DUCKDB_TILES = 4                    # ... and at least this many of the largest tile written, within half the budget
                                    # (a commit of 32 MiB tiles held two at once: 64 MB failed, 96 MB did not)

# DuckDB runs on the thread that calls it, with no worker threads of its own. Its workers, idle for half a
# second, call glibc's malloc_trim, which hands every free page of the process's heap back to the OS: the
# tiles trdb freed and keeps for its next ones (kernels/allocator.py) are then faulted in again. An
# ogbn-arxiv GCN epoch after a pause of 2.5 s took 1.3-1.9 s with DuckDB at two threads, 0.95 s at one;
# a load of 1,000,000 small tiles 1.41 -> 0.94 s, an UPDATE of them 1.39 -> 1.13 s (two cores). trdb's
# own workers run its operators in parallel; plain SQL over ordinary tables runs on the one thread too.
DUCKDB_THREADS = 1


def duckdb_bytes(limit: int, tile: int = 0) -> int:
    """The part of `limit` DuckDB itself may use (its buffer manager, while it reads and writes tiles), given
    the largest tile written so far (`tile` bytes)."""
    share = max(limit // DUCKDB_SHARE, min(limit // 2, DUCKDB_TILES * tile))
    return max(DUCKDB_MIN, min(DUCKDB_MAX, share))


class MemoryManager:
    """Bytes reserved against one limit, shared by every connection and worker of one database."""

    def __init__(self, limit: int, duckdb_share: bool = True):
        self.duckdb_share = duckdb_share  # False for a GPU's memory, of which DuckDB takes nothing
        self._lock = threading.Lock()
        self._reserved = 0
        self._shrinkers: list[Callable[[int], int]] = []
        self.largest_tile = 0  # bytes: the largest tile written, of which DuckDB's part holds a few
        self.peak = 0
        self.limit = 0
        self.resize(limit)

    def resize(self, limit: int) -> None:
        """A new memory_limit; what DuckDB takes of it is not available to trdb's reservations."""
        with self._lock:
            self.limit = max(int(limit), 1)

    @property
    def budget(self) -> int:
        """The bytes trdb's own reservations share: the limit less DuckDB's part."""
        if not self.duckdb_share:
            return self.limit
        return max(self.limit - duckdb_bytes(self.limit, self.largest_tile), self.limit // 2)

    def note_tile(self, nbytes: int) -> bool:
        """A tile of `nbytes` is written: True when DuckDB's part must grow to hold a few of them."""
        with self._lock:
            before = duckdb_bytes(self.limit, self.largest_tile)
            self.largest_tile = max(self.largest_tile, nbytes)
            return self.duckdb_share and duckdb_bytes(self.limit, self.largest_tile) != before

    @property
    def reserved(self) -> int:
        return self._reserved

    def available(self) -> int:
        return max(0, self.budget - self._reserved)

    def add_shrinker(self, shrink: Callable[[int], int]) -> None:
        """A cache that can give memory back: `shrink(n)` frees about n bytes it holds, returns how many."""
        self._shrinkers = self._shrinkers + [shrink]  # a new list: a reservation may be iterating the old one

    def remove_shrinker(self, shrink: Callable[[int], int]) -> None:
        self._shrinkers = [s for s in self._shrinkers if s != shrink]

    def try_reserve(self, nbytes: int) -> bool:
        """Reserve `nbytes` if the budget (after shrinking caches) has room; False, reserving nothing, if not."""
        if nbytes <= 0:
            return True
        if self._take(nbytes):
            return True
        for shrink in self._shrinkers:
            shrink(nbytes - self.available())
            if self._take(nbytes):
                return True
        return False

    def force_reserve(self, nbytes: int) -> None:
        """Reserve even past the budget: a reservation's guaranteed minimum (progress beats the limit)."""
        with self._lock:
            self._reserved += max(0, nbytes)
            self.peak = max(self.peak, self._reserved)

    def release(self, nbytes: int) -> None:
        with self._lock:
            self._reserved = max(0, self._reserved - max(0, nbytes))

    def _take(self, nbytes: int) -> bool:
        with self._lock:
            if self._reserved + nbytes > self.budget:
                return False
            self._reserved += nbytes
            self.peak = max(self.peak, self._reserved)
            return True

    def reservation(self, name: str, minimum: int = 0) -> "Reservation":
        return Reservation(self, name, minimum)


class Reservation:
    """One holder's share of the budget: grows on request, may be refused, and is given back at close.

    `minimum` bytes are always granted (even past the budget), so a holder of one tile can always go on.
    `peak` and `spilled` are what EXPLAIN ANALYZE reports for the operator that holds it.
    """

    def __init__(self, manager: MemoryManager, name: str, minimum: int = 0):
        self.manager, self.name, self.minimum = manager, name, max(0, minimum)
        self.held = 0
        self.peak = 0
        self.spilled = 0

    def try_grow(self, nbytes: int) -> bool:
        """Hold `nbytes` more if the budget allows (below the minimum it always does)."""
        if nbytes <= 0:
            return True
        if self.held + nbytes <= self.minimum:
            self.manager.force_reserve(nbytes)
        elif not self.manager.try_reserve(nbytes):
            return False
        self.held += nbytes
        self.peak = max(self.peak, self.held)
        return True

    def grow(self, nbytes: int) -> None:
        """Hold `nbytes` more whatever the budget says (what is already in memory and cannot be spilled)."""
        if nbytes > 0:
            self.manager.force_reserve(nbytes)
            self.held += nbytes
            self.peak = max(self.peak, self.held)

    def shrink(self, nbytes: int) -> None:
        nbytes = min(max(0, nbytes), self.held)
        self.manager.release(nbytes)
        self.held -= nbytes

    def release_all(self) -> None:
        self.shrink(self.held)

    def note_spilled(self, nbytes: int) -> None:
        self.spilled += nbytes

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, *exc) -> None:
        self.release_all()


def unlimited() -> MemoryManager:
    """A manager that never refuses: for code run outside a database (tests of single operators)."""
    return MemoryManager(1 << 62)


_DEFAULT: Optional[MemoryManager] = None


def default_manager() -> MemoryManager:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = unlimited()
    return _DEFAULT
