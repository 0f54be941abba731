"""TensorScanExec: the tuples of a stored tensor relation, read whole through the buffer pool or streamed.

A tensor the buffer pool would keep is read whole (once for all workers) and kept. A larger one is
read straight from DuckDB in bounded reads, each decoded on its own and never cached: a partition
first reads the index of its own tiles (row ids and keys, no tile bytes; the key hash is in the
SQL), then reads them in row id ranges of about `read_bytes` each. The scan's reservation holds the
index and the read in hand. An external tensor too large to keep is read the same way from its
Parquet dataset: a partition opens only its own files where the dataset's partitioning allows.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from trdb.execution.operators.list_scan import ListScanExec, bounded_batches
from trdb.execution.operators.operator import Batch
from trdb.storage.tensor_meta import TensorMeta

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
        return super()._batches()

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
        for start, stop in read_ranges(sizes, self.read_bytes()):
            memory.shrink(memory.held - index.nbytes - sizes.nbytes)  # the previous read is handed on
            memory.grow(int(sizes[start:stop].sum()))
            keys, tiles = catalog.tile_rows(self.tensor, index, start, stop, *where)
            yield from bounded_batches(self._tuples(keys, tiles))
        memory.release_all()  # exhausted: the operators above it (a join's partitions) get the room now

    def read_bytes(self) -> int:
        """A read is decoded in host memory, also for a statement on a GPU: a share of memory_limit's budget."""
        return max(1, min(READ_BYTES, self.ctx.host_budget.budget // READ_SHARE))


def read_ranges(sizes: np.ndarray, limit: int) -> Iterator[tuple[int, int]]:
    """Consecutive (start, stop) ranges of rows whose sizes sum to at most `limit` (at least one row each)."""
    ends = np.cumsum(sizes)
    start = 0
    while start < len(sizes):
        before = int(ends[start - 1]) if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, before + limit, side="right")))
        yield start, stop
        start = stop
