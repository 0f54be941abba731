"""FilterExec: keeps the tuples whose predicate holds; a condition on keys over a column batch's arrays at once."""
from __future__ import annotations

from typing import Optional

import numpy as np

from trdb.execution.column_batch import is_columns
from trdb.execution.operators.operator import Batch, PhysicalOperator
from trdb.execution.tile_math.compile import compile_predicate
from trdb.execution.tile_math.key_columns import predicate_function
from trdb.plan.expressions import Bound


class FilterExec(PhysicalOperator):
    def __init__(self, child: PhysicalOperator, predicate: Bound):
        super().__init__()
        self.children = (child,)
        self.predicate = predicate

    def _open(self) -> None:
        self._test = compile_predicate(self.predicate, self.ctx.backend)
        self._columns = predicate_function(self.predicate)  # None: not a condition on keys alone

    def _next(self) -> Optional[Batch]:
        test = self._test
        while True:
            batch = self.children[0].next_batch()
            if batch is None:
                return None
            held = self._columns(batch) if self._columns is not None and is_columns(batch, nulls=True) else None
            if held is not None:  # a column batch stays one: its tuples taken where the condition holds
                kept = batch.take(np.flatnonzero(held))
            else:
                kept = [row for row in batch if test(row)]
            if kept:
                return kept
