"""Binding GROUP BY and aggregates: Aggregate (group keys, then calls) under a Project of the select list."""
from __future__ import annotations

from typing import Optional

import numpy as np

from trdb.catalog.functions import is_aggregate
from trdb.errors import NotSupportedError, ProgrammingError
from trdb.parser import ast
from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.types import KEY, Column, KeyType, ScalarType, TensorType
from trdb.planner.conditions import check_condition
from trdb.planner.edge_tiles import check_edge_tiles
from trdb.planner.expression_binder import BindContext, ExpressionBinder, is_key_like
from trdb.planner.naming import output_names

INTEGER = ScalarType(int)


def contains_aggregate(node) -> bool:
    return any(isinstance(n, ast.FuncCall) and is_aggregate(n.name) for n in ast.walk(node))


def aggregate_type(function: str, arg: Optional[bx.Bound], groups: int):
    """COUNT and aggregates of keys are integer values (not keys: they index nothing).

    The output's `groups` keys map to the leading tile axes; the axes after them are folded
    into one tile by the aggregation, so their extent is the tile's.
    """
    if function == "COUNT":
        return INTEGER
    if isinstance(arg.type, TensorType):
        tile = arg.type.tile
        extent = tuple(e if axis < groups else t for axis, (e, t) in enumerate(zip(arg.type.extent, tile)))
        dtype = arg.type.dtype
        if function == "AVG" and not np.issubdtype(dtype, np.floating):
            dtype = np.dtype("float64")
        return TensorType(dtype, tile, extent)
    if function == "AVG":  # a number, as in SQL: NULL where no value came (a group of NULL keys)
        return ScalarType(float)
    if isinstance(arg.type, ScalarType) and arg.type.python_type is float:
        return arg.type  # SUM(2.5): a float, as its values are
    return INTEGER


class GroupedBinder(ExpressionBinder):
    """Binds select items over an Aggregate: group expressions and aggregate calls become its columns."""

    def __init__(self, ctx: BindContext, source: lp.Plan, group_by: list[bx.Bound]):
        super().__init__(ctx, source.schema)
        self.inner = ExpressionBinder(ctx, source.schema)
        self.source = source
        self.group_by = group_by
        self.calls: list[lp.AggregateCall] = []

    def bind(self, node: ast.Expr) -> bx.Bound:
        if isinstance(node, ast.FuncCall) and is_aggregate(node.name):
            return self.aggregate(node)
        if not contains_aggregate(node) and not isinstance(node, ast.Star):
            bound = self.inner.bind(node)
            if bound in self.group_by:
                return bx.ColumnIndex(self.group_by.index(bound), bound.type)
            if isinstance(bound, bx.Const):
                return bound
            if isinstance(node, ast.ColumnRef):
                label = f"{node.qualifier}.{node.name}" if node.qualifier else node.name
                raise self.ctx.fail(node, f'column "{label}" must appear in the GROUP BY clause or be used '
                                          f"in an aggregate function")
        return super().bind(node)

    def aggregate(self, node: ast.FuncCall) -> bx.Bound:
        if node.distinct:
            raise self.ctx.fail(node, f"{node.name}(DISTINCT ...) is not supported", error=NotSupportedError)
        if node.star:
            if node.name != "COUNT":
                raise self.ctx.fail(node, f"{node.name}(*) is not valid; only COUNT(*)")
            call = lp.AggregateCall("COUNT", None)
        else:
            if len(node.args) != 1:
                raise self.ctx.fail(node, f"{node.name} takes one argument, got {len(node.args)}")
            arg = self.inner.bind(node.args[0])
            self.inner.check_number(node.args[0], arg, node.name)
            call = lp.AggregateCall(node.name, arg)
            check_edge_tiles(self.ctx, node, call, self.source, self.group_by)
        if call not in self.calls:
            self.calls.append(call)
        return bx.ColumnIndex(len(self.group_by) + self.calls.index(call), aggregate_type(call.function, call.arg,
                                                                                         len(self.group_by)))


def _group_expression(ctx: BindContext, binder: ExpressionBinder, node: ast.Expr, items) -> bx.Bound:
    """A GROUP BY item: an expression over the input, a select-list position, or a select alias."""
    if isinstance(node, ast.Literal) and isinstance(node.value, int) and 1 <= node.value <= len(items):
        node = items[node.value - 1].expr
    try:
        bound = binder.bind(node)
    except ProgrammingError:
        aliased = [i.expr for i in items if isinstance(node, ast.ColumnRef) and node.qualifier is None
                   and i.alias and i.alias.lower() == node.name.lower()]
        if not aliased:
            raise
        bound = binder.bind(aliased[0])
    if not is_key_like(bound):
        raise ctx.fail(node, f"GROUP BY takes key expressions, not {bound.type}",
                       hint="group by key columns; aggregate tensors with SUM, AVG, MIN or MAX")
    return bound


def bind_grouped_select(ctx: BindContext, source: lp.Plan, select: ast.Select) -> tuple[lp.Plan, tuple]:
    inner = ExpressionBinder(ctx, source.schema)
    group_by = [_group_expression(ctx, inner, g, select.items) for g in select.group_by]
    binder = GroupedBinder(ctx, source, group_by)
    exprs, aliases, origins = [], [], []
    for item in select.items:
        if isinstance(item.expr, ast.Star):
            raise ctx.fail(item.expr, "* cannot be used with GROUP BY or aggregates")
        exprs.append(binder.bind(item.expr))
        aliases.append(item.alias)
        origins.append((item.expr.qualifier, item.expr.name) if isinstance(item.expr, ast.ColumnRef) else None)
    having = None
    if select.having is not None:  # over the groups: their keys and aggregates (which may add calls)
        having = binder.bind(select.having)
        check_condition(ctx, binder, select.having, "HAVING")
    group_names = output_names(group_by, [None] * len(group_by), [None] * len(group_by),
                               [c.name for c in source.schema])
    agg_schema = tuple(Column(n, g.type if isinstance(g.type, KeyType) else KEY) for n, g in zip(group_names, group_by))
    agg_schema += tuple(Column(c.function.lower(), aggregate_type(c.function, c.arg, len(group_by)))
                        for c in binder.calls)
    aggregate = lp.Aggregate(source, tuple(group_by), tuple(binder.calls), agg_schema)
    groups = aggregate if having is None else lp.Filter(aggregate, having)
    names = output_names(exprs, aliases, [o[1] if o else None for o in origins], [c.name for c in agg_schema])
    schema = tuple(Column(n, e.type) for n, e in zip(names, exprs))
    return lp.Project(groups, tuple(exprs), schema), tuple(origins)
