"""ProjectExec: rekeys and per-tuple kernels, each output column one compiled expression (a result's products placed)."""
from __future__ import annotations

from typing import Optional

from trdb.execution.compile import compile_expr
from trdb.execution.operators.operator import Batch, PhysicalOperator
from trdb.execution.operators.placed_product import placing_projection
from trdb.execution.operators.stacked_tiles import stacked_projection
from trdb.planner import expressions as bx


class ProjectExec(PhysicalOperator):
    canvas = None  # set by the executor on the result's last projection, whose products it places

    def __init__(self, child: PhysicalOperator, exprs: tuple[bx.Bound, ...]):
        super().__init__()
        self.children = (child,)
        self.exprs = exprs

    def _open(self) -> None:
        placing = placing_projection(self.exprs, self.canvas, self.ctx.backend) if self.canvas is not None else None
        if placing is not None:
            self._project = placing
            return
        positions = [e.index if isinstance(e, bx.ColumnIndex) else None for e in self.exprs]
        if all(p is not None for p in positions):
            # a pure rekey or column selection: no kernel runs, tuples are rebuilt by position
            self._project = lambda row: tuple(row[p] for p in positions)
        else:
            compiled = [compile_expr(e, self.ctx.backend) for e in self.exprs]
            self._project = lambda row: tuple(f(row) for f in compiled)
            self._project_batch = stacked_projection(self.exprs, compiled, self.ctx.backend)

    _project_batch = None  # elementwise columns of many small tiles: a batch's tiles stacked (stacked_tiles.py)

    def _next(self) -> Optional[Batch]:
        batch = self.children[0].next_batch()
        if batch is None:
            return None
        if self._project_batch is not None:
            return self._project_batch(batch)
        project = self._project
        return [project(row) for row in batch]
