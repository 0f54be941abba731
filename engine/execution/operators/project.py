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
        self._columns, compiled = _prepared(self.exprs, self.ctx.backend)
        positions = [e.index if isinstance(e, bx.ColumnIndex) else None for e in self.exprs]
        if all(p is not None for p in positions):
            # a pure rekey or column selection: no kernel runs, tuples are rebuilt by position
            self._project = lambda row: tuple(row[p] for p in positions)
        else:
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


_PREPARED: dict[tuple[int, int], tuple] = {}  # (id(exprs), id(backend)) -> (exprs, backend, columns, compiled)
_PREPARED_KEPT = 4096


def _prepared(exprs: tuple[bx.Bound, ...], backend) -> tuple:
    """The column projection and compiled expressions of `exprs`, made once for a plan run many times (a
    MINIMIZE step's, a query's program: pipeline/step_program.py). Not kept where a constant holds an array
    (a parameter's: the closures would keep it alive)."""
    key = (id(exprs), id(backend))
    found = _PREPARED.get(key)
    if found is not None and found[0] is exprs and found[1] is backend:
        return found[2], found[3]
    compiled = [compile_expr(e, backend) for e in exprs]
    columns = stacked_tiles.column_projection(exprs, compiled, backend)
    if not any(isinstance(node, bx.Const) and hasattr(node.value, "shape")
               for e in exprs for node in bx.subexpressions(e)):
        if len(_PREPARED) >= _PREPARED_KEPT:
            _PREPARED.clear()
        _PREPARED[key] = (exprs, backend, columns, compiled)
    return columns, compiled
