"""The binder: a query AST to a logical plan, with every name resolved and every tile shape checked."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

from trdb.catalog.catalog import Catalog
from trdb.catalog.names import did_you_mean, fold
from trdb.errors import DataError, Error, NotSupportedError
from trdb.parser import ast
from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.types import KEY, Column, TensorType, type_of_sql_column
from trdb.planner.conditions import bind_condition
from trdb.planner.einsum_binding import bind_einsum
from trdb.planner.expression_binder import BindContext, ExpressionBinder
from trdb.planner.gradient_binding import bind_gradient
from trdb.planner.grouping import bind_grouped_select, contains_aggregate
from trdb.planner.joins import bind_join, join_with_where
from trdb.planner.naming import output_names
from trdb.planner.retile import bind_retile
from trdb.storage.catalog_validation import view_query


@dataclass(frozen=True)
class BoundQuery:
    """A bound query: its logical plan and, per output column, the (qualifier, name) it came from."""

    plan: lp.Plan
    origins: tuple[Optional[tuple[Optional[str], str]], ...]


class Binder:
    """Binds the queries of one statement against the catalog."""

    def __init__(self, catalog: Catalog, ctx: BindContext, ctes: Optional[dict] = None, views: tuple = (),
                 bound: Optional[dict] = None):
        self.catalog = catalog
        self.ctx = ctx
        self.ctes = dict(ctes or {})
        self.views = views  # views being expanded, to catch a view that reads itself
        # the statement's CTEs and views bound so far, each bound once however often it is read: a CTE
        # that joins the one before it with itself, level upon level, would otherwise double the work per level
        self.bound: dict = {} if bound is None else bound

    def _inner(self, ctes: Optional[dict], views: tuple) -> "Binder":
        return Binder(self.catalog, self.ctx, ctes, views, self.bound)

    def _bound_once(self, key: tuple, bind) -> lp.Plan:
        """The plan bound for a CTE or view (`key`); one plan object for all its readers, so the stages
        after binding, which remember subplans by identity, also meet it once."""
        known = self.bound.get(key)
        if known is None:
            known = self.bound[key] = bind()
        return known

    # ------------------------------------------------------------ queries

    def bind_query(self, query: ast.Query) -> BoundQuery:
        binder = self
        if query.ctes:
            binder = self._inner(self.ctes, self.views)
            for cte in query.ctes:
                binder.ctes[fold(cte.name)] = (cte, dict(binder.ctes))
        bound = binder.bind_body(query.body)
        plan = bound.plan
        if query.order_by:
            plan = binder.bind_order(plan, bound.origins, query.order_by)
        if query.limit is not None or query.offset is not None:
            plan = lp.Limit(plan, binder.bind_count(query.limit), binder.bind_count(query.offset) or 0)
        return BoundQuery(plan, bound.origins)

    def bind_body(self, body) -> BoundQuery:
        if isinstance(body, ast.Query):
            return self.bind_query(body)
        if isinstance(body, ast.SetOp):
            return self.bind_union(body)
        return self.bind_select(body)

    def bind_union(self, node: ast.SetOp) -> BoundQuery:
        if not node.all:
            raise self.ctx.fail(node, "UNION without ALL is not supported on tensor relations",
                                hint="use UNION ALL", error=NotSupportedError)
        left, right = self.bind_body(node.left), self.bind_body(node.right)
        ls, rs = left.plan.schema, right.plan.schema
        if len(ls) != len(rs):
            raise self.ctx.fail(node, f"UNION ALL: the queries have {len(ls)} and {len(rs)} columns")
        schema = []
        for lc, rc in zip(ls, rs):
            if type(lc.type) is not type(rc.type) or (lc.is_tensor and (lc.type.dtype, lc.type.tile) !=
                                                      (rc.type.dtype, rc.type.tile)):
                raise self.ctx.fail(node, f'UNION ALL: column "{lc.name}" is {lc.type} on the left '
                                          f"and {rc.type} on the right")
            column_type = lc.type
            if lc.is_tensor:
                extent = tuple(a if a == b else None for a, b in zip(lc.type.extent, rc.type.extent))
                column_type = replace(lc.type, extent=extent)
            schema.append(Column(lc.name, column_type))
        parts = tuple(p for side in (left.plan, right.plan)
                      for p in (side.parts if isinstance(side, lp.UnionAll) else (side,)))
        return BoundQuery(lp.UnionAll(parts, tuple(schema)), left.origins)

    def bind_count(self, node: Optional[ast.Expr]) -> Optional[int]:
        if node is None:
            return None
        value = ExpressionBinder(self.ctx, ()).bind(node)
        if not isinstance(value, bx.Const) or not isinstance(value.value, int) or value.value < 0:
            raise self.ctx.fail(node, "LIMIT and OFFSET take a non-negative integer constant")
        return value.value

    def bind_order(self, plan: lp.Plan, origins, items) -> lp.Plan:
        keys, descending, nulls_first = [], [], []
        for item in items:
            position = self._order_position(plan.schema, origins, item.expr)
            keys.append(bx.ColumnIndex(position, plan.schema[position].type if plan.schema[position].is_tensor else KEY))
            descending.append(item.descending)
            nulls_first.append(item.nulls_first)
        return lp.Sort(plan, tuple(keys), tuple(descending), tuple(nulls_first))

    def _order_position(self, schema, origins, expr) -> int:
        position = self._order_column(schema, origins, expr)
        tile = schema[position].type.tile if schema[position].is_tensor else ()
        if schema[position].is_tensor and not (all(isinstance(n, int) for n in tile) and math.prod(tile) == 1):
            raise self.ctx.fail(expr, f'ORDER BY "{schema[position].name}": tiles of many values have no order',
                                hint="order by key columns, or by one value of each tile (SUMSQ(A.v), REDUCE_MAX(A.v))")
        return position

    def _order_column(self, schema, origins, expr) -> int:
        if isinstance(expr, ast.Literal) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
            if not 1 <= expr.value <= len(schema):
                raise self.ctx.fail(expr, f"ORDER BY position {expr.value} is not in the select list")
            return expr.value - 1
        if isinstance(expr, ast.ColumnRef):
            for position, (column, origin) in enumerate(zip(schema, origins)):
                if (expr.qualifier is None and fold(column.name) == fold(expr.name)) or (
                        origin and expr.qualifier and fold(origin[0] or "") == fold(expr.qualifier)
                        and fold(origin[1]) == fold(expr.name)):
                    return position
        raise self.ctx.fail(expr, "ORDER BY must name a key column of the select list",
                            hint="order by an output column name or position")

    # ------------------------------------------------------------ select

    def bind_select(self, select: ast.Select) -> BoundQuery:
        if not select.from_items:
            raise self.ctx.fail(select, "a tensor query needs a FROM clause", error=NotSupportedError)
        source, where = self.bind_from(select.from_items, select.where)
        if where is not None:
            source = lp.Filter(source, bind_condition(self.ctx, source.schema, where))
        if select.group_by or select.having is not None or any(contains_aggregate(item.expr) for item in select.items):
            plan, origins = bind_grouped_select(self.ctx, source, select)
        else:
            plan, origins = self.bind_projection(source, select.items)
        if select.distinct:
            raise self.ctx.fail(select, "SELECT DISTINCT is not supported on tensor relations",
                                error=NotSupportedError)
        return BoundQuery(plan, origins)

    def bind_projection(self, source: lp.Plan, items) -> tuple[lp.Plan, tuple]:
        binder = ExpressionBinder(self.ctx, source.schema)
        exprs, origins, aliases = [], [], []
        for item in items:
            if isinstance(item.expr, ast.Star):
                for position, column in enumerate(source.schema):
                    if item.expr.qualifier is None or fold(column.qualifier or "") == fold(item.expr.qualifier):
                        exprs.append(bx.ColumnIndex(position, column.type))
                        origins.append((column.qualifier, column.name))
                        aliases.append(column.name)
                if item.expr.qualifier and not any(fold(c.qualifier or "") == fold(item.expr.qualifier)
                                                   for c in source.schema):
                    raise self.ctx.fail(item.expr, f'no relation named "{item.expr.qualifier}" in FROM')
                continue
            exprs.append(binder.bind(item.expr))
            origins.append((item.expr.qualifier, item.expr.name) if isinstance(item.expr, ast.ColumnRef) else None)
            aliases.append(item.alias)
        names = output_names(exprs, aliases, [o[1] if o else None for o in origins],
                             [c.name for c in source.schema])
        schema = tuple(Column(n, e.type) for n, e in zip(names, exprs))
        return lp.Project(source, tuple(exprs), schema), tuple(origins)

    # ------------------------------------------------------------ from

    def bind_from(self, items, where: Optional[ast.Expr]) -> tuple[lp.Plan, Optional[ast.Expr]]:
        """The FROM list as a join tree; WHERE equalities between relations become join keys."""
        plan = self.bind_from_item(items[0])
        for item in items[1:]:
            plan, where = join_with_where(self.ctx, plan, self.bind_from_item(item), where)
        return plan, where

    def bind_from_item(self, item) -> lp.Plan:
        if isinstance(item, ast.TableRef):
            return self.bind_table(item)
        if isinstance(item, ast.JoinRef):
            return bind_join(self.ctx, item, self.bind_from_item(item.left), self.bind_from_item(item.right))
        if isinstance(item, ast.SubqueryRef):
            return requalify(self.bind_query(item.query).plan, item.alias)
        if isinstance(item, ast.GradRef):
            return requalify(self.bind_grad(item), item.alias or "grad")
        if isinstance(item, ast.EinsumRef):
            return bind_einsum(self, item)
        if isinstance(item, ast.RetileRef):
            return bind_retile(self, item)
        what = {ast.EinsumRef: "EINSUM", ast.GradRef: "GRAD", ast.RetileRef: "RETILE"}.get(type(item), "this")
        raise self.ctx.fail(item, f"{what}(...) in FROM is not supported yet", error=NotSupportedError)

    def bind_table(self, ref: ast.TableRef) -> lp.Plan:
        alias = ref.alias or ref.name
        cte = self.ctes.get(fold(ref.name))
        if cte is not None:
            node, visible = cte
            plan = self._bound_once(("cte", id(node)), lambda: self._inner(visible, self.views).bind_query(node.query).plan)
            return requalify(plan, alias)
        meta = self.catalog.tensor(ref.name)
        if meta is not None:
            key_columns = [Column(k, KEY, alias) for k in meta.keys]
            value = Column(meta.value_name, TensorType(meta.dtype, meta.tile, meta.shape), alias)
            return lp.TensorScan(meta, tuple(key_columns) + (value,))
        view = self.catalog.view(ref.name)
        if view is not None:
            return requalify(self.bind_view(ref, *view), alias)
        table = self.catalog.ordinary_table(ref.name)
        if table is not None:
            name, columns = table
            schema = tuple(Column(c, type_of_sql_column(t), alias) for c, t in columns)
            return lp.TableScan(name, tuple(c for c, _ in columns), schema)
        raise self.ctx.fail(ref, f'relation "{ref.name}" does not exist',
                            hint=did_you_mean(ref.name, self.catalog.relation_names() + list(self.ctes)))

    def bind_grad(self, item: ast.GradRef) -> lp.Plan:
        """GRAD(view, param): the gradient of the view's loss as a relation keyed like the parameter."""
        view = self.catalog.view(item.view)
        if view is None:
            raise self.ctx.fail(item, f'GRAD needs a view holding the loss; "{item.view}" is not a view',
                                hint=did_you_mean(item.view, [v[0] for v in self.catalog.views()]))
        param = self.catalog.tensor(item.param)
        if param is None:
            raise self.ctx.fail(item, f'GRAD: "{item.param}" is not a stored tensor',
                                hint=did_you_mean(item.param, [m.name for m in self.catalog.tensors()]))
        loss = self.bind_view(ast.TableRef(item.view, span=item.span), *view)
        return bind_gradient(self, item, loss, param)

    def bind_view(self, ref: ast.TableRef, name: str, text: str) -> lp.Plan:
        if fold(name) in self.views:
            raise self.ctx.fail(ref, f'view "{name}" refers to itself')
        return self._bound_once(("view", fold(name)), lambda: self._bind_view_text(name, text))

    def _bind_view_text(self, name: str, text: str) -> lp.Plan:
        try:  # views are stored as text and bound where they are used
            query = view_query(text)
        except DataError as exc:
            raise DataError(f'view "{name}" is damaged and cannot be read: {exc.message}',
                            hint=f'DROP VIEW "{name}" removes it') from None
        view_ctx = BindContext(text, self.ctx.params, self.ctx.value_limit)
        try:
            return Binder(self.catalog, view_ctx, {}, self.views + (fold(name),), self.bound).bind_query(query).plan
        except Error as exc:
            exc.message = f'in view "{name}": {exc.message}'
            raise


def requalify(plan: lp.Plan, alias: Optional[str]) -> lp.Plan:
    """The same relation with every column visible under `alias`."""
    schema = tuple(Column(c.name, c.type, alias) for c in plan.schema)
    exprs = tuple(bx.ColumnIndex(i, c.type) for i, c in enumerate(plan.schema))
    return lp.Project(plan, exprs, schema)

