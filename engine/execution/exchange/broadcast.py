"""BroadcastExec: every consumer receives every tuple (for the small side of a join)."""
from __future__ import annotations

from typing import Iterable

from trdb.execution.exchange.channel import ExchangeSourceExec, Router
from trdb.execution.operators.operator import Batch


def broadcast_router(batch: Batch, consumers: int) -> Iterable[tuple[int, Batch]]:
    return ((partition, batch) for partition in range(consumers))


class BroadcastExec(ExchangeSourceExec):
    @staticmethod
    def router(spec) -> Router:
        return broadcast_router
