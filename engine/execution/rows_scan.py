"""RowsScanExec: tuples already in memory (a shared subplan's result), partitioned like a table scan."""
from __future__ import annotations

from typing import Optional

from trdb.execution.operator import BATCH_SIZE, Batch, PhysicalOperator
from trdb.execution.partitioning import partition_of


class RowsScanExec(PhysicalOperator):
    def __init__(self, rows: list, partition: int = 0, partitions: int = 1, columns: tuple[int, ...] = ()):
        super().__init__()
        self.rows = rows
        self.partition, self.partitions, self.columns = partition, partitions, columns

    def _open(self) -> None:
        rows = self.rows
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
