"""The shared core of scans: tuples loaded at open, this partition's share of them, handed out in batches."""
from __future__ import annotations

from typing import Optional

from trdb.execution.exchange.partitioning import partition_of
from trdb.execution.operators.operator import BATCH_SIZE, Batch, PhysicalOperator


class ListScanExec(PhysicalOperator):
    """Subclasses say how to load all tuples; a partition keeps those whose key hash is its own."""

    def __init__(self, partition: int = 0, partitions: int = 1, columns: tuple[int, ...] = ()):
        super().__init__()
        self.partition, self.partitions, self.columns = partition, partitions, columns
        self._rows: list = []
        self._position = 0

    def _load(self) -> list:
        raise NotImplementedError

    def _open(self) -> None:
        rows = self._load()
        if self.partitions > 1:
            part, count, columns = self.partition, self.partitions, self.columns
            rows = [r for r in rows if partition_of(tuple(r[c] for c in columns), count) == part]
        self._rows = rows
        self._position = 0

    def _next(self) -> Optional[Batch]:
        if self._position >= len(self._rows):
            return None
        batch = self._rows[self._position:self._position + BATCH_SIZE]
        self._position += BATCH_SIZE
        return batch

    def _close(self) -> None:
        self._rows = []
