"""SortExec: orders tuples by key columns (NULLs last ascending, first descending, as in PostgreSQL)."""
from __future__ import annotations

from trdb.execution.operators.operator import BlockingOperator, PhysicalOperator, drain


class SortExec(BlockingOperator):
    def __init__(self, child: PhysicalOperator, positions: tuple[int, ...], descending: tuple[bool, ...]):
        super().__init__()
        self.children = (child,)
        self.positions = positions
        self.descending = descending

    def _compute(self) -> list:
        rows = list(drain(self.children[0]))
        # stable sorts from the last key to the first give the full ordering
        for position, descending in reversed(list(zip(self.positions, self.descending))):
            rows.sort(key=lambda r: (r[position] is None, r[position] if r[position] is not None else 0),
                      reverse=descending)
        return rows
