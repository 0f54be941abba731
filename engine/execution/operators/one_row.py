"""OneRowExec: one tuple of no columns, the relation a constant is projected from."""
from __future__ import annotations

from typing import Optional

from trdb.execution.operators.operator import Batch, PhysicalOperator


class OneRowExec(PhysicalOperator):
    def _open(self) -> None:
        self._given = False

    def _next(self) -> Optional[Batch]:
        if self._given:
            return None
        self._given = True
        return [()]
