"""The buffer pool: decoded tiles of whole tensors kept in memory, least recently used evicted first."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

import numpy as np

from trdb.kernels.sparse import nbytes

TensorTiles = tuple[np.ndarray, list]  # keys (n x m), read-only tiles (dense arrays or CSR tiles)


class BufferPool:
    """Caches (keys, tiles) per (tile table, version); a write bumps the version and drops the entry."""

    def __init__(self, limit_bytes: int):
        self.limit_bytes = limit_bytes
        self._entries: OrderedDict[str, tuple[int, TensorTiles, int]] = OrderedDict()
        self._versions: dict[str, int] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}
        self.hits = 0
        self.misses = 0

    def get(self, table: str, load: Callable[[], TensorTiles]) -> TensorTiles:
        with self._loading_lock(table):  # workers scanning one tensor read it from DuckDB once
            return self._get(table, load)

    def _loading_lock(self, table: str) -> threading.Lock:
        with self._lock:
            return self._loading.setdefault(table, threading.Lock())

    def _get(self, table: str, load: Callable[[], TensorTiles]) -> TensorTiles:
        with self._lock:
            version = self._versions.get(table, 0)
            entry = self._entries.get(table)
            if entry is not None and entry[0] == version:
                self._entries.move_to_end(table)
                self.hits += 1
                return entry[1]
        self.misses += 1
        tiles = load()
        size = sum(nbytes(t) for t in tiles[1]) + tiles[0].nbytes
        with self._lock:
            if self._versions.get(table, 0) == version and size <= self.limit_bytes:
                self._drop(table)
                self._entries[table] = (version, tiles, size)
                self._bytes += size
                self._evict()
        return tiles

    def invalidate(self, table: str) -> None:
        with self._lock:
            self._versions[table] = self._versions.get(table, 0) + 1
            self._drop(table)

    def clear(self) -> None:
        with self._lock:
            for table in set(self._entries) | set(self._versions):
                self._versions[table] = self._versions.get(table, 0) + 1
            self._entries.clear()
            self._bytes = 0

    def resize(self, limit_bytes: int) -> None:
        with self._lock:
            self.limit_bytes = limit_bytes
            self._evict()

    def _drop(self, table: str) -> None:
        entry = self._entries.pop(table, None)
        if entry is not None:
            self._bytes -= entry[2]

    def _evict(self) -> None:
        while self._bytes > self.limit_bytes and self._entries:
            _, (_, _, size) = self._entries.popitem(last=False)
            self._bytes -= size
