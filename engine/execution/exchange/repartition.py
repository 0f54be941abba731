"""RepartitionExec: hash repartitioning on key columns, N producers to M consumers."""
from __future__ import annotations

from typing import Iterable

import numpy as np

from trdb.execution.column_batch import ColumnBatch, is_columns
from trdb.execution.exchange.channel import ExchangeSourceExec, Router
from trdb.execution.exchange.partitioning import partition_of
from trdb.execution.operators.operator import Batch
from trdb.storage.key_hash import key_hash_array


def hash_router(columns: tuple[int, ...]):
    def route(batch: Batch, consumers: int) -> Iterable[tuple[int, Batch]]:
        if is_columns(batch) and not any(batch.is_tile[c] for c in columns):
            return _column_parts(batch, columns, consumers)
        parts: dict[int, Batch] = {}
        for row in batch:
            parts.setdefault(partition_of(tuple(row[c] for c in columns), consumers), []).append(row)
        return parts.items()
    return route


class RepartitionExec(ExchangeSourceExec):
    @staticmethod
    def router(spec) -> Router:
        return hash_router(spec.columns)


def _column_parts(batch: ColumnBatch, columns: tuple[int, ...], consumers: int) -> list[tuple[int, Batch]]:
    """A column batch split by the key hash of all its tuples at once, each part a column batch (the
    partition each tuple goes to is the one `partition_of` gives it)."""
    keys = np.stack([batch.columns[c] for c in columns], axis=1) if columns else np.zeros((len(batch), 0), np.int64)
    targets = key_hash_array(keys) % consumers
    return [(int(target), batch.take(np.flatnonzero(targets == target))) for target in np.unique(targets)]
