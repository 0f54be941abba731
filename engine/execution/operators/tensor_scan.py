"""TensorScanExec: the tuples of a stored tensor relation, read whole through the buffer pool or streamed.

A tensor the buffer pool would keep is read whole (once for all workers) and kept. A larger one is
read straight from DuckDB in bounded reads, each decoded on its own and never cached: a partition
first reads the index of its own tiles (row ids and keys, no tile bytes; the key hash is in the
SQL), then reads them in row id ranges of about `read_bytes` each. The scan's reservation holds the
index and the read in hand. An external tensor too large to keep is read the same way from its
Parquet dataset: a partition opens only its own files where the dataset's partitioning allows.
"""
from __future__ import annotations

from typing import Iterable, Iterator, Optional

import numpy as np

from trdb.execution.bounded_ranges import bounded_ranges
from trdb.execution.column_batch import ColumnBatch, batch_rows, columns_row_bytes
from trdb.execution.operators.list_scan import ListScanExec, bounded_batches
from trdb.execution.operators.operator import Batch
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.storage.key_hash import key_hash_array
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_runs import TileRuns

READ_BYTES = 16 << 20   # one read from DuckDB: large enough that its fixed cost (~1 ms) is small against its bytes
READ_SHARE = 8          # ... and at most this part of the memory budget


class TensorScanExec(ListScanExec):
    def __init__(self, tensor: TensorMeta, partition: int = 0, partitions: int = 1, columns: tuple[int, ...] = ()):
        super().__init__(partition, partitions, columns)
        self.tensor = tensor

    def _load(self) -> list:
        keys, tiles = self.ctx.catalog.tiles(self.tensor)
        return self._tuples(keys, tiles)

    def _tuples(self, keys: np.ndarray, tiles: list) -> list:
        asarray = self.ctx.backend.asarray
        return [tuple(k) + (asarray(t),) for k, t in zip(keys.tolist(), tiles)]

    def _batches(self) -> Iterator[Batch]:
        if self.ctx.catalog.streams(self.tensor):
            return self._external() if self.tensor.external else self._streamed()
        if self.tensor.keys and self.ctx.backend is NUMPY_BACKEND:
            stacked = self.ctx.catalog.tile_stacks(self.tensor)  # a write's stacks, as they are
            if stacked is not None:
                pieces = [(start, start + len(stack), stack) for start, stack in stacked.runs]
                return self._column_batches(stacked.keys, pieces, [])
            keys, tiles = self.ctx.catalog.tiles(self.tensor)
            if isinstance(tiles, TileRuns) and tiles.runs:
                return self._column_batches(keys, tiles.pieces(), tiles)
        return super()._batches()

    def _column_batches(self, keys: np.ndarray, pieces: Iterable[tuple[int, int, Optional[np.ndarray]]],
                        tiles: list) -> Iterator[Batch]:
        """This partition's tuples of the runs of stacked tiles as column batches (slices of the keys and of a
        run's stack: as many tuples as `batch_rows` says), the others (`tiles`, the
        pieces without a stack) in list batches. A partition takes its rows of a run by the key hash of all of
        them at once."""
        mine = None
        if self.partitions > 1:
            mine = key_hash_array(keys[:, list(self.columns)]) % self.partitions == self.partition
        is_tile = (False,) * keys.shape[1] + (True,)
        for start, stop, stack in pieces:
            if stack is None:
                rows = range(start, stop) if mine is None else (start + np.flatnonzero(mine[start:stop])).tolist()
                yield from bounded_batches(self._tuples(keys[rows], [tiles[r] for r in rows]))
                continue
            piece_keys = keys[start:stop]
            if mine is not None:
                taken = np.flatnonzero(mine[start:stop])
                piece_keys, stack = piece_keys[taken], stack[taken]
            step = batch_rows(columns_row_bytes([piece_keys, stack]))
            for offset in range(0, len(stack), step):
                part = piece_keys[offset:offset + step]
                yield ColumnBatch([*part.T, stack[offset:offset + step]], is_tile)

    def _external(self) -> Iterator[Batch]:
        memory = self.reservation()
        reads = self.ctx.catalog.external_reads(self.tensor, self.partition, self.partitions, self.columns,
                                                self.read_bytes())
        for keys, tiles in reads:
            memory.shrink(memory.held)  # the previous read is handed on
            memory.grow(sum(t.nbytes for t in tiles))
            yield from bounded_batches(self._tuples(keys, tiles))
        memory.release_all()

    def _streamed(self) -> Iterator[Batch]:
        catalog, where = self.ctx.catalog, (self.partition, self.partitions, self.columns)
        index, sizes = catalog.tile_index(self.tensor, *where)
        memory = self.reservation()
        memory.grow(index.nbytes + sizes.nbytes)
        for start, stop in bounded_ranges(sizes, self.read_bytes()):
            memory.shrink(memory.held - index.nbytes - sizes.nbytes)  # the previous read is handed on
            memory.grow(int(sizes[start:stop].sum()))
            keys, tiles = catalog.tile_rows(self.tensor, index, start, stop, *where)
            yield from bounded_batches(self._tuples(keys, tiles))
        memory.release_all()  # exhausted: the operators above it (a join's partitions) get the room now

    def read_bytes(self) -> int:
        """A read is decoded in host memory, also for a statement on a GPU: a share of memory_limit's budget."""
        return max(1, min(READ_BYTES, self.ctx.host_budget.budget // READ_SHARE))
