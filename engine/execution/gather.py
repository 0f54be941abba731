"""GatherExec: M producers to one consumer (the top of a parallel plan)."""
from __future__ import annotations

from typing import Iterable

from trdb.execution.exchange import ExchangeSourceExec
from trdb.execution.operator import Batch


def gather_router(batch: Batch, consumers: int) -> Iterable[tuple[int, Batch]]:
    return ((0, batch),)


class GatherExec(ExchangeSourceExec):
    pass
