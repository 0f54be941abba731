"""UnionAllExec: the tuples of each input in turn."""
from __future__ import annotations

from typing import Optional

from trdb.execution.operators.operator import Batch, PhysicalOperator


class UnionAllExec(PhysicalOperator):
    def __init__(self, children: tuple[PhysicalOperator, ...]):
        super().__init__()
        self.children = children

    def _open(self) -> None:
        self._current = 0

    def _next(self) -> Optional[Batch]:
        while self._current < len(self.children):
            batch = self.children[self._current].next_batch()
            if batch is not None:
                return batch
            self._current += 1
        return None
