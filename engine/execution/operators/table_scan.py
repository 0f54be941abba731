"""TableScanExec: the rows of an ordinary (plain SQL) table, read through DuckDB."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from trdb.execution.column_batch import ColumnBatch, batch_rows, columns_row_bytes
from trdb.execution.operators.list_scan import ListScanExec
from trdb.execution.operators.operator import Batch
from trdb.storage.key_hash import key_hash_array
from trdb.storage.ordinary_tables import read_integer_columns, read_ordinary_table


class TableScanExec(ListScanExec):
    def __init__(self, table: str, columns: tuple[str, ...]):
        super().__init__()
        self.table = table
        self.columns_read = columns

    def _load(self) -> list:
        return read_ordinary_table(self.ctx.catalog.db, self.table, self.columns_read)

    def _batches(self) -> Iterator[Batch]:
        """A table of integer columns without NULLs (keys, such as a relation's triples) comes as column
        batches, this partition's rows taken by hashing their keys at once; any other as tuples."""
        arrays = read_integer_columns(self.ctx.catalog.db, self.table, self.columns_read)
        if arrays is None:
            return super()._batches()
        if self.partitions > 1:
            keys = np.stack([arrays[c] for c in self.columns], axis=1) if self.columns else \
                np.zeros((len(arrays[0]), 0), np.int64)
            mine = np.flatnonzero(key_hash_array(keys) % self.partitions == self.partition)
            arrays = [a[mine] for a in arrays]
        return _column_batches(arrays)


def _column_batches(arrays: list[np.ndarray]) -> Iterator[ColumnBatch]:
    is_tile = (False,) * len(arrays)
    step = batch_rows(columns_row_bytes(arrays))
    for start in range(0, len(arrays[0]), step):
        yield ColumnBatch([a[start:start + step] for a in arrays], is_tile)
