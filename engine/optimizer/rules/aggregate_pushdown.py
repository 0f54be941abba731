"""aggregate_pushdown: SUM over an inner join to a side with unique join keys is summed before the join.

`SUM(x)` grouped by G over `P JOIN U ON P.k = U.k`, where U has no two tuples with the same k and x
reads only P, equals summing x over P grouped by (P's columns of G, P.k) first, then joining with U:
every tuple of such a group meets the same U tuple (or none). The same holds for `SUM(x * u)` and
`SUM(MATMUL(x, u))` (either order) where u reads only U, because u is constant within the group
and both kernels are linear in x. A final SUM regroups by G; it is dropped when G already names
every column of the early grouping, as each group then holds one tuple.

Not rewritten: other aggregates (AVG, MIN, MAX, COUNT), outer joins, joins with a residual
condition, groups on computed keys, and pushdowns that would not reduce the tuples (the early
grouping includes a unique key of P). Float sums may round differently from the unrewritten plan.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from trdb.optimizer.plan_rewrite import transform_up, unique_keys
from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.types import KEY, Column, KeyType, TensorType
from trdb.planner.grouping import aggregate_type

_LINEAR = ("*", "MATMUL")  # kernels linear in each argument


def aggregate_pushdown(plan: lp.Plan, context) -> lp.Plan:
    """Every SUM-only Aggregate over a qualifying inner join split into an early SUM, the join and a regroup."""
    return transform_up(plan, _rewrite)


def _rewrite(plan: lp.Plan) -> lp.Plan:
    if not (isinstance(plan, lp.Aggregate) and isinstance(plan.input, lp.Join)):
        return plan
    join = plan.input
    if join.kind != "INNER" or join.residual is not None or not join.left_keys or not plan.calls:
        return plan
    if any(c.function != "SUM" or c.arg is None for c in plan.calls):
        return plan
    if not all(isinstance(g, bx.ColumnIndex) for g in plan.group_by):
        return plan
    for pushed_left in (True, False):
        sides = _Sides.of(join, pushed_left)
        rewritten = _push(plan, sides) if sides.unique_other() else None
        if rewritten is not None:
            return rewritten
    return plan


@dataclass(frozen=True)
class _Sides:
    """The join seen from the side P that is summed early; U is the side with unique join keys."""

    join: lp.Join
    pushed_left: bool

    @staticmethod
    def of(join: lp.Join, pushed_left: bool) -> "_Sides":
        return _Sides(join, pushed_left)

    @property
    def p(self) -> lp.Plan:
        return self.join.left if self.pushed_left else self.join.right

    @property
    def u(self) -> lp.Plan:
        return self.join.right if self.pushed_left else self.join.left

    @property
    def p_keys(self) -> tuple:
        return self.join.left_keys if self.pushed_left else self.join.right_keys

    @property
    def u_keys(self) -> tuple:
        return self.join.right_keys if self.pushed_left else self.join.left_keys

    @property
    def p_offset(self) -> int:
        return 0 if self.pushed_left else len(self.join.left.schema)

    @property
    def u_offset(self) -> int:
        return len(self.join.left.schema) if self.pushed_left else 0

    def in_p(self, column: int) -> bool:
        return 0 <= column - self.p_offset < len(self.p.schema)

    def reads_only_p(self, expr: bx.Bound) -> bool:
        return all(self.in_p(c) for c in bx.columns_used(expr))

    def reads_only_u(self, expr: bx.Bound) -> bool:
        return not any(self.in_p(c) for c in bx.columns_used(expr))

    def unique_other(self) -> bool:
        return any(key <= set(self.u_keys) for key in unique_keys(self.u))


def _split(arg: bx.Bound, sides: _Sides) -> Optional[tuple[bx.Bound, Optional[int], Optional[bx.Call]]]:
    """(the part of the argument summed early, its position in the call, the linear call) or None."""
    if sides.reads_only_p(arg):
        return (arg, None, None) if isinstance(arg.type, TensorType) else None
    if isinstance(arg, bx.Call) and arg.function.name in _LINEAR and len(arg.args) == 2:
        for position, part in enumerate(arg.args):
            other = arg.args[1 - position]
            if sides.reads_only_p(part) and sides.reads_only_u(other) and _float_tensor(part) \
                    and _float_tensor(other) and part.type.dtype == arg.type.dtype:
                return part, position, arg
    return None


def _float_tensor(expr: bx.Bound) -> bool:
    return isinstance(expr.type, TensorType) and np.issubdtype(expr.type.dtype, np.floating)


def _push(plan: lp.Aggregate, sides: _Sides) -> Optional[lp.Plan]:
    splits = [_split(c.arg, sides) for c in plan.calls]
    if any(s is None for s in splits):
        return None
    p_groups = [g.index - sides.p_offset for g in plan.group_by if sides.in_p(g.index)]
    early_groups = list(dict.fromkeys(p_groups + list(sides.p_keys)))
    if any(key <= set(early_groups) for key in unique_keys(sides.p)):
        return None  # P is already unique on the early groups: nothing would be summed
    early = _early_aggregate(sides, early_groups, [s[0] for s in splits])
    joined = _rejoin(sides, early, early_groups)
    return _regroup(plan, sides, joined, early_groups, splits)


def _early_aggregate(sides: _Sides, groups: list, parts: list) -> lp.Aggregate:
    p = sides.p
    mapping = {c: c - sides.p_offset for part in parts for c in bx.columns_used(part)}
    group_by = tuple(bx.ColumnIndex(g, p.schema[g].type) for g in groups)
    calls = tuple(lp.AggregateCall("SUM", bx.remap_columns(part, mapping)) for part in parts)
    schema = tuple(Column(p.schema[g].name, p.schema[g].type if isinstance(p.schema[g].type, KeyType) else KEY)
                   for g in groups)
    schema += tuple(Column("sum", aggregate_type("SUM", call.arg, len(groups))) for call in calls)
    return lp.Aggregate(p, group_by, calls, schema)


def _rejoin(sides: _Sides, early: lp.Aggregate, groups: list) -> lp.Join:
    early_keys = tuple(groups.index(k) for k in sides.p_keys)
    if sides.pushed_left:
        return lp.Join(early, sides.u, "INNER", early_keys, sides.u_keys, early.schema + sides.u.schema)
    return lp.Join(sides.u, early, "INNER", sides.u_keys, early_keys, sides.u.schema + early.schema)


def _regroup(plan: lp.Aggregate, sides: _Sides, joined: lp.Join, groups: list, splits: list) -> lp.Plan:
    early_offset = 0 if sides.pushed_left else len(sides.u.schema)
    u_offset = len(joined.left.schema) if sides.pushed_left else 0

    def position(column: int) -> int:  # a column of the old join in the new one
        if sides.in_p(column):
            return early_offset + groups.index(column - sides.p_offset)
        return u_offset + column - sides.u_offset

    mapping = {c: position(c) for c in range(len(plan.input.schema))
               if not sides.in_p(c) or (c - sides.p_offset) in groups}
    group_by = tuple(bx.remap_columns(g, mapping) for g in plan.group_by)
    args = []
    for index, (part, slot, call) in enumerate(splits):
        column = early_offset + len(groups) + index
        summed = bx.ColumnIndex(column, joined.schema[column].type)
        if call is None:
            args.append(summed)
        else:
            other = bx.remap_columns(call.args[1 - slot], {c: mapping[c] for c in bx.columns_used(call.args[1 - slot])})
            pair = (summed, other) if slot == 0 else (other, summed)
            args.append(bx.Call(call.function, pair, call.type))
    if _one_tuple_per_group(plan, sides, groups):
        return lp.Project(joined, group_by + tuple(args), plan.schema)
    return lp.Aggregate(joined, group_by, tuple(lp.AggregateCall("SUM", a) for a in args), plan.schema)


def _one_tuple_per_group(plan: lp.Aggregate, sides: _Sides, groups: list) -> bool:
    """G names every early group column (a U join key stands for its P partner): no regrouping needed."""
    named = set()
    pairs = dict(zip(sides.u_keys, sides.p_keys))
    for g in plan.group_by:
        if sides.in_p(g.index):
            named.add(g.index - sides.p_offset)
        elif g.index - sides.u_offset in pairs:
            named.add(pairs[g.index - sides.u_offset])
    return set(groups) <= named and len(plan.group_by) > 0
