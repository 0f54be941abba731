"""RowsScanExec: tuples already in memory (a shared subplan's result), partitioned like a tensor scan."""
from __future__ import annotations

from trdb.execution.operators.list_scan import ListScanExec


class RowsScanExec(ListScanExec):
    def __init__(self, rows: list, partition: int = 0, partitions: int = 1, columns: tuple[int, ...] = ()):
        super().__init__(partition, partitions, columns)
        self.rows = rows

    def _load(self) -> list:
        return self.rows
