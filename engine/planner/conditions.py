"""Binding conditions (WHERE, a join's ON): a condition keeps or drops a whole tuple, so it needs one truth value
per tuple; a comparison of whole tiles (`A.v > 0`) gives one per element, and is refused where it is written."""
from __future__ import annotations

import math

from trdb.parser import ast
from trdb.plan import expressions as bx
from trdb.plan.types import Schema, TensorType
from trdb.planner.expression_binder import BindContext, ExpressionBinder

_LOGICAL = ("AND", "OR")


def bind_condition(ctx: BindContext, schema: Schema, node: ast.Expr, clause: str = "WHERE") -> bx.Bound:
    """`node` bound over `schema`; a part of it that gives a tile of many elements is a ProgrammingError with a
    caret under that part (at run time it failed on the first tuple, without saying where)."""
    binder = ExpressionBinder(ctx, schema)
    bound = binder.bind(node)
    check_condition(ctx, binder, node, clause)
    return bound


def check_condition(ctx: BindContext, binder: ExpressionBinder, node: ast.Expr, clause: str) -> None:
    """Refuse the first operand of AND, OR and NOT in `node` that gives more than one value per tuple."""
    if isinstance(node, ast.BinaryOp) and node.op in _LOGICAL:
        check_condition(ctx, binder, node.left, clause)
        check_condition(ctx, binder, node.right, clause)
        return
    if isinstance(node, ast.UnaryOp) and node.op == "NOT":
        check_condition(ctx, binder, node.operand, clause)
        return
    # BETWEEN and IN compare their operand's elements: a tile of many gives a tile of truth values too
    bound = binder.bind(node.operand if isinstance(node, (ast.Between, ast.InList)) else node)
    if isinstance(bound.type, TensorType) and _elements(bound.type.tile) > 1:
        text = ctx.text[node.span.start:node.span.end] if node.span.end > node.span.start else "this condition"
        tile = bound.type.tile
        size = "x".join(map(str, tile)) if len(tile) > 1 else f"{tile[0]}-element"
        raise ctx.fail(node, f"{clause} keeps or drops whole tuples, but {text} gives a {size} tile of truth values "
                             "per tuple",
                       hint=f"reduce each tile to one value (REDUCE_MAX({_operand(ctx, node)}) > 0 keeps the tuples "
                            "with a positive element, REDUCE_SUM(...), REDUCE_MEAN(...)), or compute on the elements "
                            "in the select list instead: RELU(A.v), or A.v * CAST(A.v > 0 AS float32) as a mask")


def _elements(tile: tuple) -> int:
    return math.prod(tile) if all(isinstance(n, int) for n in tile) else 1


def _operand(ctx: BindContext, node: ast.Expr) -> str:
    """The left side of a comparison as written (`A.v` of `A.v > 0`), else the whole condition."""
    target = node.left if isinstance(node, ast.BinaryOp) else \
        node.operand if isinstance(node, (ast.Between, ast.InList)) else node
    span = target.span
    return ctx.text[span.start:span.end] if span.end > span.start else "A.v"
