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
            # an input that has ended gives its memory back now (a join's build side, an aggregate's
            # groups), not at the end of the statement: the bands of a banded aggregate run one by one
            self.children[self._current].close()
            self._current += 1
        return None

    def close(self) -> None:
        try:
            self._close()
        finally:
            self.release_reservations()
            for child in self.children[getattr(self, "_current", 0):]:
                child.close()
