"""The shared core of scans: this partition's tuples, handed out in batches bounded in tuples and in bytes."""
from __future__ import annotations

from typing import Iterable, Iterator, Optional

from trdb.execution.exchange.channel import row_bytes
from trdb.execution.exchange.partitioning import partition_of
from trdb.execution.operators.operator import BATCH_SIZE, Batch, PhysicalOperator

BATCH_BYTES = 4 << 20  # a batch also ends at about this many bytes: 64 tiles of 4 MB would be 256 MB in one batch


class ListScanExec(PhysicalOperator):
    """Subclasses say how to load all tuples (`_load`), or how to stream this partition's batches
    (`_batches`); by default a partition keeps the loaded tuples whose key hash is its own."""

    reads_tiles = True

    def __init__(self, partition: int = 0, partitions: int = 1, columns: tuple[int, ...] = ()):
        super().__init__()
        self.partition, self.partitions, self.columns = partition, partitions, columns
        self._stream: Optional[Iterator[Batch]] = None

    def _load(self) -> list:
        raise NotImplementedError

    def _batches(self) -> Iterator[Batch]:
        rows = self._load()
        if self.partitions > 1:
            rows = [r for r in rows if self._owns(r)]
        return bounded_batches(rows)

    def _owns(self, row: tuple) -> bool:
        return partition_of(tuple(row[c] for c in self.columns), self.partitions) == self.partition

    def _open(self) -> None:
        self._stream = self._batches()

    def _next(self) -> Optional[Batch]:
        return next(self._stream, None)

    def _close(self) -> None:
        stream, self._stream = self._stream, None
        close = getattr(stream, "close", None)
        if close is not None:  # a generator: it stops reading now, not at garbage collection
            try:
                close()
            except ValueError:
                pass  # still running in another thread (a cancellation): it stops at its next batch


def bounded_batches(rows: Iterable[tuple], max_bytes: int = BATCH_BYTES) -> Iterator[Batch]:
    """Non-empty batches of at most BATCH_SIZE tuples, each ending once it holds `max_bytes` or more."""
    batch, size = [], 0
    for row in rows:
        batch.append(row)
        size += row_bytes(row)
        if len(batch) >= BATCH_SIZE or size >= max_bytes:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch
