"""Lineage: every tuple of a plan carries the keys of the stored tuples it was computed from.

A gradient relation is keyed by lineage, so the gradient of a tuple can always be paired with the
tuple (and its input values) again, however the query rekeyed or dropped keys on the way.
"""
from __future__ import annotations

import sys

from trdb.catalog.names import fold
from trdb.errors import NotSupportedError
from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.types import KEY, Column, TensorType


def lineage_columns(count: int, start: int = 0) -> tuple[Column, ...]:
    return tuple(Column(f"_lineage{start + n}", KEY) for n in range(count))


def _keep(schema, extra: list[bx.Bound]) -> tuple[bx.Bound, ...]:
    return tuple(bx.ColumnIndex(i, c.type) for i, c in enumerate(schema)) + tuple(extra)


def with_lineage(plan: lp.Plan) -> tuple[lp.Plan, int]:
    """`plan` with its lineage columns appended, and how many there are."""
    return lp.handler(sys.modules[__name__], plan)(plan)


def _TensorScan(plan: lp.TensorScan):
    keys = [bx.ColumnIndex(i, KEY) for i in range(len(plan.tensor.keys))]
    schema = plan.schema + lineage_columns(len(keys))
    return lp.Project(plan, _keep(plan.schema, keys), schema), len(keys)


def _OneRow(plan: lp.OneRow):
    return plan, 0


def _TableScan(plan: lp.TableScan):
    schema = plan.schema + lineage_columns(1)
    return lp.TableScan(plan.table, plan.columns + ("rowid",), schema), 1


def _Filter(plan: lp.Filter):
    inner, count = with_lineage(plan.input)
    return lp.Filter(inner, plan.predicate), count


def _Sort(plan: lp.Sort):
    inner, count = with_lineage(plan.input)
    return lp.Sort(inner, plan.keys, plan.descending, plan.nulls_first), count


def _Limit(plan: lp.Limit):
    raise NotSupportedError("GRAD: LIMIT is not differentiable (which tuples it keeps is not a function of "
                            "the values)")


def _Retile(plan):
    raise NotSupportedError("GRAD through RETILE (or an EINSUM whose operands are retiled) is not supported yet",
                            hint="give the operands the same tile size on shared indices")


def _Project(plan: lp.Project):
    inner, count = with_lineage(plan.input)
    width = len(plan.input.schema)
    lineage = [bx.ColumnIndex(width + n, KEY) for n in range(count)]
    return lp.Project(inner, plan.exprs + tuple(lineage), plan.schema + lineage_columns(count)), count


def _Join(plan: lp.Join):
    left, left_count = with_lineage(plan.left)
    right, right_count = with_lineage(plan.right)
    wl, wr = len(plan.left.schema), len(plan.right.schema)
    residual = None
    if plan.residual is not None:
        shift = {i: (i if i < wl else i + left_count) for i in bx.columns_used(plan.residual)}
        residual = bx.remap_columns(plan.residual, shift)
    joined = lp.Join(left, right, plan.kind, plan.left_keys, plan.right_keys, left.schema + right.schema, residual)
    # reorder to: left columns, right columns, left lineage, right lineage
    order = list(range(wl)) + [wl + left_count + r for r in range(wr)] + \
        [wl + n for n in range(left_count)] + [wl + left_count + wr + n for n in range(right_count)]
    exprs = tuple(bx.ColumnIndex(i, joined.schema[i].type) for i in order)
    schema = plan.schema + lineage_columns(left_count + right_count)
    return lp.Project(joined, exprs, schema), left_count + right_count


def _Aggregate(plan: lp.Aggregate):
    groups = [bx.ColumnIndex(i, plan.schema[i].type) for i in range(len(plan.group_by))]
    return lp.Project(plan, _keep(plan.schema, groups), plan.schema + lineage_columns(len(groups))), len(groups)


def _UnionAll(plan: lp.UnionAll):
    parts = [with_lineage(p) for p in plan.parts]
    count = 1 + max(c for _, c in parts)
    width = len(plan.schema)
    branches = []
    for branch, (part, part_count) in enumerate(parts):
        tag = [bx.Const(branch, KEY)]
        lineage = [bx.ColumnIndex(width + n, KEY) for n in range(part_count)]
        padding = [bx.Const(0, KEY)] * (count - 1 - part_count)
        exprs = _keep(part.schema[:width], tag + lineage + padding)
        branches.append(lp.Project(part, exprs, plan.schema + lineage_columns(count)))
    return lp.UnionAll(tuple(branches), plan.schema + lineage_columns(count)), count


def lineage_width(plan: lp.Plan) -> int:
    return with_lineage(plan)[1]


def tensor_sources(plan: lp.Plan) -> list[frozenset[str]]:
    """For each output column, the stored tensors whose values flow into it (folded names)."""
    if isinstance(plan, lp.TensorScan):
        return [frozenset({fold(plan.tensor.name)}) if isinstance(c.type, TensorType) else frozenset()
                for c in plan.schema]
    if isinstance(plan, (lp.TableScan, lp.OneRow)):
        return [frozenset() for _ in plan.schema]
    if isinstance(plan, (lp.Filter, lp.Sort, lp.Limit)):
        return tensor_sources(plan.input)
    if isinstance(plan, lp.Project):
        inner = tensor_sources(plan.input)
        return [frozenset().union(*(inner[i] for i in bx.columns_used(e))) for e in plan.exprs]
    if isinstance(plan, lp.Join):
        return tensor_sources(plan.left) + tensor_sources(plan.right)
    if isinstance(plan, lp.Retile):
        value = frozenset().union(*tensor_sources(plan.input))
        return [frozenset()] * (len(plan.schema) - 1) + [value]
    if isinstance(plan, lp.Aggregate):
        inner = tensor_sources(plan.input)
        calls = [frozenset().union(*(inner[i] for i in bx.columns_used(c.arg))) if c.arg is not None
                 else frozenset() for c in plan.calls]
        return [frozenset()] * len(plan.group_by) + calls
    parts = [tensor_sources(p) for p in plan.parts]
    return [frozenset().union(*column) for column in zip(*parts)]
