"""RepartitionExec: hash repartitioning on key columns, N producers to M consumers."""
from __future__ import annotations

from typing import Iterable

from trdb.execution.exchange.channel import ExchangeSourceExec, Router
from trdb.execution.exchange.partitioning import partition_of
from trdb.execution.operators.operator import Batch


def hash_router(columns: tuple[int, ...]):
    def route(batch: Batch, consumers: int) -> Iterable[tuple[int, Batch]]:
        parts: dict[int, Batch] = {}
        for row in batch:
            parts.setdefault(partition_of(tuple(row[c] for c in columns), consumers), []).append(row)
        return parts.items()
    return route


class RepartitionExec(ExchangeSourceExec):
    @staticmethod
    def router(spec) -> Router:
        return hash_router(spec.columns)
