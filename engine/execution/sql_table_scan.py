"""SqlTableScanExec: the rows of an ordinary (plain SQL) table, read through DuckDB."""
from __future__ import annotations

from typing import Optional

from trdb.execution.operator import BATCH_SIZE, Batch, PhysicalOperator


class SqlTableScanExec(PhysicalOperator):
    def __init__(self, table: str, columns: tuple[str, ...]):
        super().__init__()
        self.table = table
        self.columns = columns
        self._rows: list = []
        self._position = 0

    def _open(self) -> None:
        names = ", ".join(f'"{c}"' for c in self.columns)
        self._rows = self.ctx.catalog.db.execute(f'SELECT {names} FROM "{self.table}"')
        self._position = 0

    def _next(self) -> Optional[Batch]:
        if self._position >= len(self._rows):
            return None
        batch = self._rows[self._position:self._position + BATCH_SIZE]
        self._position += BATCH_SIZE
        return batch

    def _close(self) -> None:
        self._rows = []
