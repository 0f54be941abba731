"""Writing a tensor's tiles in bounded batches: tiles are held, encoded and inserted a few MB at a time.

A statement that writes a tensor (FILL, FROM an array or file, CREATE ... AS, INSERT, UPDATE,
MINIMIZE's steps) adds its tiles one by one; the writer inserts them whenever the batch reaches
`batch_bytes` or the memory budget refuses to hold more, so a write holds one batch (and its
encoded copy) however large the tensor. Every batch goes into the statement's one transaction:
a failure in a later batch rolls back the earlier ones too.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

import numpy as np

from trdb.kernels.sparse import is_sparse
from trdb.storage import tile_store
from trdb.storage.database import Database
from trdb.storage.external_tensors import refuse_write
from trdb.storage.tensor_meta import TensorMeta

# Measured on 8192² float32 in 1024² tiles (file database, one transaction): 16 MB inserts took no longer
# than one 256 MB insert (3.0 s against 4.2 s, noisy), 4 MB inserts about 1.3x: a batch of a few tiles will do.
BATCH_BYTES = 16 << 20
BATCH_TILES = 1 << 14  # millions of tiny tiles cost more per tile than per byte: a count bound too
# ... but tiles in one stack hold no Python object each: their bound is larger. DuckDB appends fewer,
# larger batches faster (1,000,000 rows of 256 bytes in a transaction: 0.36 s in batches of 16,384, 0.28 s
# in 65,536; an UPDATE of 1,000,000 tiles of 8 x 8, 0.49 against 0.38 s; a load, 0.40 against 0.33 s)
STACK_TILES = 1 << 16
STREAM_RUN = 1024  # tiles `add_stream` makes ahead of the writer
BUDGET_SHARE = 8  # a batch takes at most this fraction of the budget (other operators hold the rest)


def tile_bytes(tile: Any) -> int:
    """Bytes a host tile holds: a dense array's values, a CSR tile's three arrays."""
    if is_sparse(tile):
        return int(tile.data.nbytes + tile.indices.nbytes + tile.indptr.nbytes)
    return int(np.asarray(tile).nbytes)


@dataclass
class WrittenTiles:
    """What a writer inserted, batch by batch, for the buffer pool to keep: (keys n x m, the tiles as a
    list or a stack) as they were added; `all_dense`: every tile was dense and is stored dense."""

    batches: list = field(default_factory=list)
    all_dense: bool = True


class TileWriter:
    """Tiles of one tensor added one by one, inserted in batches; `close()` inserts the last batch.

    `after_batch` runs after each insert (a memory-mapped source drops the pages it has read);
    `keep`: the writer records what it inserted in `kept` (WrittenTiles)."""

    def __init__(self, db: Database, meta: TensorMeta, batch_bytes: int = BATCH_BYTES,
                 after_batch: Optional[Callable[[], None]] = None, keep: bool = False, overwrite: bool = False):
        refuse_write(meta)
        self.db, self.meta = db, meta
        self.overwrite = overwrite  # tile_store.insert_encoded's: an UPDATE's tiles, over stored ones
        memory = db.file.memory
        self.batch_bytes = max(1, min(batch_bytes, memory.budget // BUDGET_SHARE))
        self.reservation = memory.reservation(f"write {meta.name}")
        self.after_batch = after_batch
        self.written = 0
        self.batches = 0
        self.statistics = tile_store.WrittenStatistics(len(meta.keys), meta.grid)  # of what it inserted
        self.kept: Optional[WrittenTiles] = WrittenTiles() if keep else None
        self._keys: list[tuple[int, ...]] = []
        self._tiles: list = []
        self._pending = 0

    def add(self, key: tuple[int, ...], tile: Any) -> None:
        """Hold `tile` (dense or CSR, on the host) under `key`; the batch is inserted when it is full."""
        held = 2 * tile_bytes(tile)  # the tile and its encoded copy while the batch is inserted
        if self._tiles and (self._pending + held > 2 * self.batch_bytes or len(self._tiles) >= BATCH_TILES
                            or not self.reservation.try_grow(held)):
            self.flush()
        if not self._tiles:
            self.reservation.grow(held)  # one tile always goes on, whatever the budget
        self._keys.append(tuple(key))
        self._tiles.append(tile)
        self._pending += held

    def add_all(self, keys: Any, tiles: list) -> None:
        """`add` each tile (`keys`: an n x m array, or n key tuples), the room in the batch and the budget asked
        once for as many as fit."""
        key_tuples = list(map(tuple, np.asarray(keys).tolist()))
        held = np.fromiter((2 * tile_bytes(tile) for tile in tiles), dtype=np.int64, count=len(tiles))
        start = 0
        while start < len(tiles):
            run = self._room(held[start:])
            run_bytes = int(held[start:start + run].sum())
            if run == 0:
                self.add(key_tuples[start], tiles[start])  # the batch is full: it goes in, this one starts the next
                start += 1
            elif self.reservation.try_grow(run_bytes):
                self._keys.extend(key_tuples[start:start + run])
                self._tiles.extend(tiles[start:start + run])
                self._pending += run_bytes
                start += run
            else:  # the budget is short: one at a time, each inserted as the budget allows
                for key, tile in zip(key_tuples[start:], tiles[start:]):
                    self.add(key, tile)
                return

    def add_stack(self, keys: np.ndarray, stack: np.ndarray) -> None:
        """`add_all` of tiles of one shape stacked in one host array `(n, *tile)` (`keys`: n x m), inserted
        straight from it in runs of a batch: no Python step per tile. The tiles held before go in first."""
        self.flush()
        each = 2 * int(stack[0].nbytes) if len(stack) else 0  # a tile and its encoded copy (or its view)
        per_run = max(1, min(STACK_TILES, 2 * self.batch_bytes // max(each, 1)))
        for start in range(0, len(stack), per_run):
            run = stack[start:start + per_run]
            self.reservation.grow(each * len(run))  # a run is a batch's bytes, as a batch of single tiles
            csr_before = self.statistics.csr_tuples
            self.written += tile_store.write_stack(self.db, self.meta, keys[start:start + per_run], run,
                                                   self.statistics, self.overwrite)
            self._kept(keys[start:start + per_run], run, csr_before)
            self.batches += 1
            self.flush()

    def add_stream(self, pairs: Iterable[tuple[tuple[int, ...], Any]]) -> None:
        """`add_all` of (key, tile) pairs made only as they are asked for, a run at a time: at most STREAM_RUN
        tiles, or a quarter of a batch's bytes, are made ahead of the writer."""
        keys: list[tuple[int, ...]] = []
        tiles: list = []
        held = 0
        for key, tile in pairs:
            keys.append(tuple(key))
            tiles.append(tile)
            held += tile_bytes(tile)
            if len(tiles) >= STREAM_RUN or held >= self.batch_bytes // 4:
                self.add_all(keys, tiles)
                keys, tiles, held = [], [], 0
        if tiles:
            self.add_all(keys, tiles)

    def add_cast(self, keys: Sequence[tuple[int, ...]], tiles: Sequence, dtype: np.dtype,
                 kept: Optional[list] = None) -> None:
        """`add_stream` of the dense tiles cast to `dtype`; `kept`, if given, receives every cast tile."""
        def cast() -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
            for key, tile in zip(keys, tiles):
                tile = np.asarray(tile, dtype=dtype)
                if kept is not None:
                    kept.append(tile)
                yield key, tile
        self.add_stream(cast())

    def _room(self, held: np.ndarray) -> int:
        """How many of the next tiles (of `held` bytes each) the batch takes before it is full."""
        if not self._tiles:
            return 0  # the first tile of a batch goes in through `add`, whatever its size
        room = 2 * self.batch_bytes - self._pending
        fitting = int(np.searchsorted(np.cumsum(held[:BATCH_TILES]), room, side="right"))
        return max(0, min(fitting, BATCH_TILES - len(self._tiles)))

    def flush(self) -> None:
        """Insert the tiles held (all-zero ones too: zeros are values) and give their memory back."""
        if self._tiles:
            keys = np.array(self._keys, dtype=np.int64).reshape(len(self._keys), len(self.meta.keys))
            tiles, self._keys, self._tiles, self._pending = self._tiles, [], [], 0
            csr_before = self.statistics.csr_tuples
            self.written += tile_store.write_tiles(self.db, self.meta, keys, tiles, self.statistics, self.overwrite)
            self._kept(keys, tiles, csr_before)
            self.batches += 1
            del tiles
        self.reservation.release_all()
        if self.after_batch is not None:
            self.after_batch()

    def _kept(self, keys: np.ndarray, tiles, csr_before: int) -> None:
        if self.kept is None:
            return
        self.kept.batches.append((keys, tiles))
        if self.statistics.csr_tuples != csr_before or (isinstance(tiles, list) and any(map(is_sparse, tiles))):
            self.kept.all_dense = False  # the buffer pool would keep another array than a read gives

    def close(self) -> int:
        """Insert what is left; returns the tiles written in all."""
        self.flush()
        return self.written

    def __enter__(self) -> "TileWriter":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close()
        else:  # the statement fails: its transaction rolls back, nothing more is written
            self._keys, self._tiles, self._pending = [], [], 0
            self.reservation.release_all()
