"""An aggregate that would add tiles of two shapes: a stored tensor whose SHAPE is not a multiple of its TILE has
smaller edge tiles, and SUM(A.v) over a group that spans such an axis meets both. Where the binder can be sure
(every tile stored, no filter or join between the scan and the aggregate), it says so with a caret under the
call; elsewhere the run-time error carries the same hint (EDGE_TILES_HINT)."""
from __future__ import annotations

from typing import Optional

from trdb.errors import DataError
from trdb.parser import ast
from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.types import TensorType
from trdb.planner.expression_binder import BindContext

EDGE_TILES_HINT = ("an aggregate adds whole tiles, and a tensor whose SHAPE is not a multiple of its TILE has smaller "
                   "edge tiles: reduce each tile first (SUM(REDUCE_SUM(A.v)) adds every element), group by the keys "
                   "of the ragged axes, or store the tensor with a TILE that divides its SHAPE")
_VERBS = {"SUM": "adds", "AVG": "averages", "MIN": "compares", "MAX": "compares"}


def check_edge_tiles(ctx: BindContext, node: ast.FuncCall, call: lp.AggregateCall, source: lp.Plan,
                     group_by: list[bx.Bound]) -> None:
    """Refuse `call` when every one of its groups adds a stored tensor's full tiles to its smaller edge tiles."""
    column = _tile_column(call.arg) if call.function in _VERBS else None
    origin = _scan_column(source, column) if column is not None else None
    if origin is None:
        return
    scan, position = origin
    meta = scan.tensor
    if position != len(meta.keys) or meta.tuple_count != meta.max_tuples:
        return  # not the tile column, or some tiles absent (the edge ones may be)
    grouped = set()  # the scan's key columns that a group key reads (any use of one counts: no tiles mix there)
    for expr in group_by:
        for column in _columns(expr):
            found = _scan_column(source, column)
            if found is not None and found[0] is scan:
                grouped.add(found[1])
    for axis, key in enumerate(meta.keys):
        if axis in grouped or meta.grid[axis] < 2 or not meta.shape[axis] % meta.tile[axis]:
            continue
        edge = list(meta.tile)
        edge[axis] = meta.shape[axis] % meta.tile[axis]
        # the run-time error's words and class: the same mistake reads the same, found early or late
        raise ctx.fail(node, f"{call.function}: tiles of one group have shapes {meta.tile} and {tuple(edge)}: "
                             f"{_written(ctx, node, call.function)} {_VERBS[call.function]} the tiles of {meta.name} "
                             f"along its key {key}, where SHAPE {meta.shape} in TILE {meta.tile} leaves smaller "
                             "edge tiles",
                       hint=_hint(ctx, node, call.function, _key_name(source, scan, axis), meta.name), error=DataError)


def _written(ctx: BindContext, node, default: str) -> str:
    span = getattr(node, "span", None)
    return ctx.text[span.start:span.end] if span is not None and span.end > span.start else default


def _hint(ctx: BindContext, node: ast.FuncCall, function: str, key: Optional[str], name: str) -> str:
    operand = _written(ctx, node.args[0], "A.v")
    reduced = {"SUM": f"SUM(REDUCE_SUM({operand})) adds every element",
               "AVG": f"SUM(REDUCE_SUM({operand})) divided by the element count is the mean",
               "MAX": f"MAX(REDUCE_MAX({operand})) is the largest element",
               "MIN": f"-MAX(REDUCE_MAX(-{operand})) is the smallest element"}[function]
    grouped = f"; adding {key} to GROUP BY keeps the tiles of each shape apart" if key else ""
    return f"reduce each tile first: {reduced}{grouped}; or store {name} with a TILE that divides its SHAPE"


def _key_name(source: lp.Plan, scan: lp.TensorScan, axis: int) -> Optional[str]:
    """How the query names the scan's key column `axis` (alias.key), if its FROM passes the key on."""
    for position, column in enumerate(source.schema):
        if _scan_column(source, position) == (scan, axis):
            return f"{column.qualifier}.{column.name}" if column.qualifier else column.name
    return None


def _tile_column(expr: Optional[bx.Bound]) -> Optional[int]:
    """The one tile column whose tiles `expr` keeps the shape of: the column itself, or an elementwise kernel of it
    (with constants); None for anything else (a reduction or product may change or unify the shapes)."""
    if isinstance(expr, bx.ColumnIndex) and isinstance(expr.type, TensorType):
        return expr.index
    if not (isinstance(expr, bx.Call) and expr.function.elementwise and isinstance(expr.type, TensorType)):
        return None
    columns = {_tile_column(a) for a in expr.args if isinstance(a.type, TensorType) and not isinstance(a, bx.Const)}
    if len(columns) != 1 or None in columns or any(isinstance(a, bx.Const) and isinstance(a.type, TensorType)
                                                   for a in expr.args):
        return None
    return columns.pop()


def _columns(expr: bx.Bound) -> list[int]:
    """The input columns a key expression reads."""
    if isinstance(expr, bx.ColumnIndex):
        return [expr.index]
    if isinstance(expr, bx.KeyArith):
        return _columns(expr.left) + _columns(expr.right)
    if isinstance(expr, bx.Coalesce):
        return [c for a in expr.args for c in _columns(a)]
    return []


def _scan_column(plan: lp.Plan, index: int) -> Optional[tuple[lp.TensorScan, int]]:
    """The stored tensor scan and column that column `index` of `plan` passes on unchanged, through projections
    only (a filter or join may leave some tiles out)."""
    while isinstance(plan, lp.Project):
        expr = plan.exprs[index]
        if not isinstance(expr, bx.ColumnIndex):
            return None
        plan, index = plan.input, expr.index
    return (plan, index) if isinstance(plan, lp.TensorScan) else None
