"""FilterExec: keeps the tuples whose predicate holds."""
from __future__ import annotations

from typing import Optional

from trdb.execution.operators.operator import Batch, PhysicalOperator
from trdb.execution.tile_math.compile import compile_predicate
from trdb.plan.expressions import Bound


class FilterExec(PhysicalOperator):
    def __init__(self, child: PhysicalOperator, predicate: Bound):
        super().__init__()
        self.children = (child,)
        self.predicate = predicate

    def _open(self) -> None:
        self._test = compile_predicate(self.predicate, self.ctx.backend)

    def _next(self) -> Optional[Batch]:
        test = self._test
        while True:
            batch = self.children[0].next_batch()
            if batch is None:
                return None
            kept = [row for row in batch if test(row)]
            if kept:
                return kept
