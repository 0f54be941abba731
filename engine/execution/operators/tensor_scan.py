"""TensorScanExec: the tuples of a stored tensor relation, read through the buffer pool."""
from __future__ import annotations

from trdb.execution.operators.list_scan import ListScanExec
from trdb.storage.tensor_meta import TensorMeta


class TensorScanExec(ListScanExec):
    def __init__(self, tensor: TensorMeta, partition: int = 0, partitions: int = 1, columns: tuple[int, ...] = ()):
        super().__init__(partition, partitions, columns)
        self.tensor = tensor

    def _load(self) -> list:
        keys, tiles = self.ctx.catalog.tiles(self.tensor)
        asarray = self.ctx.backend.asarray
        return [tuple(k) + (asarray(t),) for k, t in zip(keys.tolist(), tiles)]
