"""ProjectExec: rekeys and per-tuple kernels, each output column one compiled expression (a result's products placed)."""
from __future__ import annotations

from typing import Optional

from trdb.execution.column_batch import is_columns
from trdb.execution.operators.operator import Batch, PhysicalOperator
from trdb.execution.tile_math import stacked_tiles
from trdb.execution.tile_math.compile import compile_expr
from trdb.execution.tile_math.placed_product import placing_projection
from trdb.plan import expressions as bx


class ProjectExec(PhysicalOperator):
    canvas = None  # set by the executor on the result's last projection, whose products it places

    def __init__(self, child: PhysicalOperator, exprs: tuple[bx.Bound, ...]):
        super().__init__()
        self.children = (child,)
        self.exprs = exprs

    def _open(self) -> None:
        self._columns = None
        placing = placing_projection(self.exprs, self.canvas, self.ctx.backend) if self.canvas is not None else None
        if placing is not None:
            self._project = placing
            return
        self._columns = stacked_tiles.column_projection(
            self.exprs, [compile_expr(e, self.ctx.backend) for e in self.exprs], self.ctx.backend)
        positions = [e.index if isinstance(e, bx.ColumnIndex) else None for e in self.exprs]
        if all(p is not None for p in positions):
            # a pure rekey or column selection: no kernel runs, tuples are rebuilt by position
            self._project = lambda row: tuple(row[p] for p in positions)
        else:
            compiled = [compile_expr(e, self.ctx.backend) for e in self.exprs]
            self._project = lambda row: tuple(f(row) for f in compiled)
            self._compiled = compiled

    _columns = None   # the projection of a column batch into one (tile_math/stacked_tiles.py), where there is one
    _compiled = None  # kernels run: a batch of many small tiles may be stacked (tile_math/stacked_tiles.py)
    _stacked = None   # the stacked projection, once a batch large enough came (False: none applies)

    def _next(self) -> Optional[Batch]:
        batch = self.children[0].next_batch()
        if batch is None:
            return None
        if self._columns is not None and is_columns(batch, nulls=True):  # NULL keys pass through as masks
            projected = self._columns(batch)
            if projected is not None:
                return projected
        if self._compiled is not None and len(batch) >= stacked_tiles.MIN_STACKED and self._stacked is not False:
            if self._stacked is None:
                self._stacked = stacked_tiles.stacked_projection(self.exprs, self._compiled, self.ctx.backend) or False
            if self._stacked:
                return self._stacked(batch)
        project = self._project
        return [project(row) for row in batch]
