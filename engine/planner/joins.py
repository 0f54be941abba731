"""Binding joins: key equalities in ON (or in WHERE, for FROM lists) become the join's key columns."""
from __future__ import annotations

from typing import Optional

from trdb.errors import NotSupportedError, ProgrammingError
from trdb.parser import ast
from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.planner.conditions import bind_condition
from trdb.planner.expression_binder import BindContext, ExpressionBinder


def _key_pair(expr: bx.Bound, left_width: int) -> Optional[tuple[int, int]]:
    """(left position, right position) when `expr` is `left key = right key`."""
    if not (isinstance(expr, bx.Compare) and expr.op == "="):
        return None
    a, b = expr.left, expr.right
    if not (isinstance(a, bx.ColumnIndex) and isinstance(b, bx.ColumnIndex)):
        return None
    if a.index >= left_width > b.index:
        a, b = b, a
    if a.index < left_width <= b.index and a.type == b.type and not hasattr(a.type, "tile"):
        return a.index, b.index - left_width
    return None


def _split_keys(conditions: list[bx.Bound], left_width: int):
    left_keys, right_keys, residual = [], [], []
    for condition in conditions:
        pair = _key_pair(condition, left_width)
        if pair is None:
            residual.append(condition)
        else:
            left_keys.append(pair[0])
            right_keys.append(pair[1])
    return tuple(left_keys), tuple(right_keys), residual


def bind_join(ctx: BindContext, item: ast.JoinRef, left: lp.Plan, right: lp.Plan) -> lp.Plan:
    if item.kind == "RIGHT":
        swapped = bind_join(ctx, ast.JoinRef("LEFT", item.right, item.left, item.condition, item.span), right, left)
        width = len(right.schema)
        order = list(range(width, len(swapped.schema))) + list(range(width))
        exprs = tuple(bx.ColumnIndex(i, swapped.schema[i].type) for i in order)
        return lp.Project(swapped, exprs, tuple(swapped.schema[i] for i in order))
    schema = left.schema + right.schema
    if item.condition is None:
        conditions = []
    elif item.kind in ("INNER", "CROSS"):  # anything but key equalities filters the pairs: one truth value each
        conditions = bx.conjuncts(bind_condition(ctx, schema, item.condition, "ON"))
    else:  # an outer join takes key equalities only, as the error below says
        conditions = bx.conjuncts(ExpressionBinder(ctx, schema).bind(item.condition))
    left_keys, right_keys, residual = _split_keys(conditions, len(left.schema))
    kind = "INNER" if item.kind in ("INNER", "CROSS") else item.kind
    if kind != "INNER" and (residual or not left_keys):
        raise ctx.fail(item, f"a {kind} JOIN needs ON with key equalities only (left.key = right.key AND ...)",
                       error=NotSupportedError)
    return lp.Join(left, right, kind, left_keys, right_keys, schema, bx.conjunction(residual))


def _ast_conjuncts(node: Optional[ast.Expr]) -> list[ast.Expr]:
    if node is None:
        return []
    if isinstance(node, ast.BinaryOp) and node.op == "AND":
        return _ast_conjuncts(node.left) + _ast_conjuncts(node.right)
    return [node]


def _ast_and(nodes: list[ast.Expr]) -> Optional[ast.Expr]:
    if not nodes:
        return None
    result = nodes[0]
    for node in nodes[1:]:
        result = ast.BinaryOp("AND", result, node, node.span)
    return result


def join_with_where(ctx: BindContext, left: lp.Plan, right: lp.Plan,
                    where: Optional[ast.Expr]) -> tuple[lp.Plan, Optional[ast.Expr]]:
    """Join two FROM-list relations on the WHERE equalities between them; return the rest of WHERE."""
    schema = left.schema + right.schema
    binder = ExpressionBinder(ctx, schema)
    left_keys, right_keys, remaining = [], [], []
    for node in _ast_conjuncts(where):
        try:
            pair = _key_pair(binder.bind(node), len(left.schema))
        except ProgrammingError:
            pair = None  # it names a relation joined later; WHERE binds it in full afterwards
        if pair is None:
            remaining.append(node)
        else:
            left_keys.append(pair[0])
            right_keys.append(pair[1])
    join = lp.Join(left, right, "INNER", tuple(left_keys), tuple(right_keys), schema)
    return join, _ast_and(remaining)
