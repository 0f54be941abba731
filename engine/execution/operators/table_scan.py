"""TableScanExec: the rows of an ordinary (plain SQL) table, read through DuckDB."""
from __future__ import annotations

from trdb.execution.operators.list_scan import ListScanExec
from trdb.storage.ordinary_tables import read_ordinary_table


class TableScanExec(ListScanExec):
    def __init__(self, table: str, columns: tuple[str, ...]):
        super().__init__()
        self.table = table
        self.columns_read = columns

    def _load(self) -> list:
        return read_ordinary_table(self.ctx.catalog.db, self.table, self.columns_read)
