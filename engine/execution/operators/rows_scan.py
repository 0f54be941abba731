"""RowsScanExec: tuples already computed (a shared subplan's, in a list or a spool), partitioned like a tensor scan."""
from __future__ import annotations

from typing import Iterator, Optional, Union

from trdb.execution.exchange.partitioning import partition_of
from trdb.execution.operators.operator import BATCH_SIZE, Batch, PhysicalOperator
from trdb.execution.spool import RowSpool, row_batches


class RowsScanExec(PhysicalOperator):
    """Reads the tuples batch by batch (a spilled spool from its file); a partition keeps those whose key hash is its own."""

    reads_tiles = True

    def __init__(self, rows: Union[list, RowSpool], partition: int = 0, partitions: int = 1,
                 columns: tuple[int, ...] = ()):
        super().__init__()
        self.rows = rows
        self.partition, self.partitions, self.columns = partition, partitions, columns
        self._batches: Optional[Iterator[Batch]] = None

    def _open(self) -> None:
        self._batches = row_batches(self.rows, BATCH_SIZE)

    def _next(self) -> Optional[Batch]:
        for batch in self._batches:
            if self.partitions > 1:
                batch = self._own(batch)
            if batch:
                return batch
        return None

    def _own(self, batch: Batch) -> Batch:
        part, count, columns = self.partition, self.partitions, self.columns
        return [r for r in batch if partition_of(tuple(r[c] for c in columns), count) == part]

    def _close(self) -> None:
        self._batches = None
