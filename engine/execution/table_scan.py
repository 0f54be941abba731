"""TableScanExec: the tuples of a stored tensor relation, read through the buffer pool."""
from __future__ import annotations

from typing import Optional

from trdb.catalog.tensor_meta import TensorMeta
from trdb.execution.operator import BATCH_SIZE, Batch, PhysicalOperator


class TableScanExec(PhysicalOperator):
    def __init__(self, tensor: TensorMeta):
        super().__init__()
        self.tensor = tensor
        self._rows: list = []
        self._position = 0

    def describe(self) -> str:
        return f"{self.name}({self.tensor.name})"

    def _open(self) -> None:
        keys, tiles = self.ctx.catalog.tiles(self.tensor)
        backend = self.ctx.backend
        self._rows = [tuple(k) + (backend.asarray(t),) for k, t in zip(keys.tolist(), tiles)]
        self._position = 0

    def _next(self) -> Optional[Batch]:
        if self._position >= len(self._rows):
            return None
        batch = self._rows[self._position:self._position + BATCH_SIZE]
        self._position += BATCH_SIZE
        return batch

    def _close(self) -> None:
        self._rows = []
