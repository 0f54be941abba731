"""SqlTableScanExec: the rows of an ordinary (plain SQL) table, read through DuckDB."""
from __future__ import annotations

from trdb.execution.list_scan import ListScanExec
from trdb.storage.sql_text import quote_identifier


class SqlTableScanExec(ListScanExec):
    def __init__(self, table: str, columns: tuple[str, ...]):
        super().__init__()
        self.table = table
        self.columns_read = columns

    def _load(self) -> list:
        names = ", ".join(quote_identifier(c) for c in self.columns_read)
        return self.ctx.catalog.db.execute(f"SELECT {names} FROM {quote_identifier(self.table)}")
