"""The buffer pool: decoded tiles of whole tensors kept in memory, least recently used evicted first.

Beside a tensor's tiles it may keep the tensor as one array (a DenseEinsum's operand), under the
same table and version with a third part, "whole": a write's `invalidate` drops both.

Its bytes are reserved from the database's memory manager; when an operator needs memory the
budget does not have, the pool gives back its least recently used tensors first (`shrink`)."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Optional, Union

import numpy as np

from trdb.kernels.sparse import nbytes
from trdb.storage.memory import MemoryManager
from trdb.storage.tile_runs import StackedTiles, TileRuns

TensorTiles = tuple[np.ndarray, list]  # keys (n x m), read-only tiles (dense arrays or CSR tiles)
TileVersion = tuple  # a tile table and the data version of its contents (and "whole": as one array)
Kept = Union[TensorTiles, StackedTiles, np.ndarray]  # what an entry holds: the tiles, or the tensor as one array


class BufferPool:
    """Caches (keys, tiles) per (tile table, data version), shared by every connection to one database.

    A data version names one content of a tile table for ever (versions come from a sequence and a
    write takes a new one), so an entry is never stale: a connection reads the version its catalog
    snapshot names, and a write only makes older versions unreachable (they are dropped or evicted).
    """

    def __init__(self, memory: MemoryManager):
        self.memory = memory
        memory.add_shrinker(self.shrink)
        self._entries: OrderedDict[TileVersion, tuple[Kept, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._loading: dict[TileVersion, threading.Lock] = {}
        self._unread: dict[TileVersion, int] = {}  # kept by writes (`put`), one after another, not read since
        self.hits = 0
        self.misses = 0

    def get(self, key: TileVersion, load: Callable[[], Kept]) -> Kept:
        kept = self.hit(key)  # a hit takes one lock
        if kept is not None:
            return kept
        with self._loading_lock(key):  # workers scanning one tensor read it from DuckDB once
            return self._get(key, load)

    def hit(self, key: TileVersion) -> Optional[Kept]:
        """What the pool keeps under `key`, counted as used now (a hit), or None: nothing is read."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            self._unread.pop(key, None)
            self.hits += 1
            return entry[0]

    def _loading_lock(self, key: TileVersion) -> threading.Lock:
        with self._lock:
            if len(self._loading) > 4 * len(self._entries) + 64:  # forget the locks of versions long gone
                self._loading = {k: lock for k, lock in self._loading.items() if k in self._entries or lock.locked()}
            return self._loading.setdefault(key, threading.Lock())

    def _get(self, key: TileVersion, load: Callable[[], Kept]) -> Kept:
        kept = self.hit(key)  # loaded by another worker while this one waited
        if kept is not None:
            return kept
        self.misses += 1
        tiles = load()
        self._keep(key, tiles)
        return tiles

    def peek(self, key: TileVersion) -> Optional[Kept]:
        """What the pool keeps under `key`, or None: nothing is read."""
        with self._lock:
            entry = self._entries.get(key)
            return None if entry is None else entry[0]

    def put(self, key: TileVersion, tiles: Union[TensorTiles, StackedTiles], writes: int = 1) -> None:
        """Keep tiles just written as the whole contents of `key` (sorted keys, read-only tiles, exactly
        as a read would give them): the next scan need not read them back. `writes`: how many writes kept
        these contents one from another's with no read between (`unread_writes`), this one included."""
        with self._loading_lock(key):
            self._keep(key, tiles)
            with self._lock:
                if key in self._entries:
                    self._unread[key] = writes

    def unread_writes(self, key: TileVersion) -> int:
        """The `writes` that kept what the pool keeps under `key`, where no read has used it since (0: a read
        did, or a read put it there)."""
        with self._lock:
            return self._unread.get(key, 0)

    def _keep(self, key: TileVersion, tiles: Kept) -> None:
        size = tiles.nbytes if isinstance(tiles, (np.ndarray, StackedTiles)) else \
            _tiles_bytes(tiles[1]) + tiles[0].nbytes
        with self._lock:
            self._drop(key)
        if size <= self.memory.budget // 2 and self.memory.try_reserve(size):
            with self._lock:
                self._entries[key] = (tiles, size)
                self._bytes += size

    def would_keep(self, size: int) -> bool:
        """Whether a tensor of `size` decoded bytes is small enough to be read whole and kept."""
        return size <= self.memory.budget // 2

    @property
    def bytes(self) -> int:
        return self._bytes

    def invalidate(self, table: str) -> None:
        """A write replaced the table's contents: its cached versions will not be read again (soon)."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == table]:
                self._drop(key)

    def shrink(self, wanted: int) -> int:
        """Give back at least `wanted` bytes (least recently used first, while there are any); returns them."""
        freed = 0
        with self._lock:
            while freed < wanted and self._entries:
                key, (_, size) = self._entries.popitem(last=False)
                self._unread.pop(key, None)
                self._bytes -= size
                freed += size
        self.memory.release(freed)
        return freed

    def fit(self) -> None:
        """After the budget shrank: give back what the budget no longer covers."""
        self.shrink(self.memory.reserved - self.memory.budget)

    def _drop(self, key: TileVersion) -> None:
        self._unread.pop(key, None)
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry[1]
            self.memory.release(entry[1])


def _tiles_bytes(tiles: list) -> int:
    """The bytes a read's tiles hold: a run's stack at once (storage/tile_runs.py), the others one by one."""
    if not isinstance(tiles, TileRuns):
        return sum(nbytes(t) for t in tiles)
    return sum(int(stack.nbytes) if stack is not None else sum(nbytes(t) for t in tiles[start:stop])
               for start, stop, stack in tiles.pieces())
