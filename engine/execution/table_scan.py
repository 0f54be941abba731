"""TableScanExec: the tuples of a stored tensor relation, read through the buffer pool."""
from __future__ import annotations

from typing import Optional

from trdb.catalog.tensor_meta import TensorMeta
from trdb.execution.operator import BATCH_SIZE, Batch, PhysicalOperator
from trdb.execution.partitioning import partition_of


class TableScanExec(PhysicalOperator):
    def __init__(self, tensor: TensorMeta, partition: int = 0, partitions: int = 1, columns: tuple[int, ...] = ()):
        super().__init__()
        self.tensor = tensor
        self.partition, self.partitions, self.columns = partition, partitions, columns
        self._rows: list = []
        self._position = 0

    def _open(self) -> None:
        keys, tiles = self.ctx.catalog.tiles(self.tensor)
        backend = self.ctx.backend
        rows = [tuple(k) + (backend.asarray(t),) for k, t in zip(keys.tolist(), tiles)]
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
