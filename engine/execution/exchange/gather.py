"""GatherExec: M producers to one consumer (the top of a parallel plan)."""
from __future__ import annotations

from typing import Iterable

from trdb.execution.exchange.channel import ExchangeSourceExec, Router
from trdb.execution.operators.operator import Batch


def gather_router(batch: Batch, consumers: int) -> Iterable[tuple[int, Batch]]:
    return ((0, batch),)


class GatherExec(ExchangeSourceExec):
    @staticmethod
    def router(spec) -> Router:
        return gather_router
