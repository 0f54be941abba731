"""LimitExec: LIMIT and OFFSET."""
from __future__ import annotations

from typing import Optional

from trdb.execution.operators.operator import Batch, PhysicalOperator


class LimitExec(PhysicalOperator):
    def __init__(self, child: PhysicalOperator, limit: Optional[int], offset: int):
        super().__init__()
        self.children = (child,)
        self.limit = limit
        self.offset = offset

    def _open(self) -> None:
        self._skip = self.offset
        self._left = self.limit

    def _next(self) -> Optional[Batch]:
        while self._left is None or self._left > 0:
            batch = self.children[0].next_batch()
            if batch is None:
                return None
            if self._skip:
                dropped = min(self._skip, len(batch))
                batch, self._skip = batch[dropped:], self._skip - dropped
            if self._left is not None:
                batch = batch[:self._left]
                self._left -= len(batch)
            if batch:
                return batch
        return None
