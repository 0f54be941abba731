"""join_ordering: a tree of three or more inner joins is re-ordered by dynamic programming over estimated cost.

The binder joins FROM items left to right. Here a maximal tree of inner key-equality joins is
flattened into its inputs and conditions; every subset of inputs gets its cheapest plan (the
estimated bytes of all intermediate results, from the cardinality estimates, plus their FLOPs),
splits that share no condition are only used when nothing else connects; the cheapest plan of all
inputs replaces the tree when it is cheaper, under a projection that restores the column order.
Exact up to MAX_EXACT inputs; larger trees are ordered greedily (the cheapest pair first, then
the input whose join with what is built so far costs least).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from trdb.optimizer.cardinality import Estimator
from trdb.optimizer.plan_rewrite import with_inputs
from trdb.planner import expressions as bx
from trdb.planner import logical as lp

MAX_EXACT = 10


@dataclass(frozen=True)
class _Option:
    cost: float
    plan: lp.Plan
    columns: tuple[int, ...]   # the original (global) column number of each output column


def join_ordering(plan: lp.Plan, context) -> lp.Plan:
    """Every maximal tree of inner joins in its cheapest order."""
    return _Orderer(Estimator(getattr(context, "catalog", None))).rewrite(plan)


def _is_inner(plan: lp.Plan) -> bool:
    return isinstance(plan, lp.Join) and plan.kind == "INNER" and plan.residual is None


class _Orderer:
    def __init__(self, estimator: Estimator):
        self.estimator = estimator
        self._done: dict[int, tuple[lp.Plan, lp.Plan]] = {}

    def rewrite(self, plan: lp.Plan) -> lp.Plan:
        done = self._done.get(id(plan))
        if done is None or done[0] is not plan:
            done = (plan, self._rewrite(plan))
            self._done[id(plan)] = done
        return done[1]

    def _rewrite(self, plan: lp.Plan) -> lp.Plan:
        if not _is_inner(plan):
            return with_inputs(plan, [self.rewrite(child) for child in plan.inputs])
        leaves: list[lp.Plan] = []
        conditions: list[tuple[int, int]] = []
        _flatten(plan, leaves, conditions, 0)
        leaves = [self.rewrite(leaf) for leaf in leaves]
        if len(leaves) < 3:
            return self._rebuild(plan)
        best = self._best(leaves, conditions) if len(leaves) <= MAX_EXACT else self._greedy(leaves, conditions)
        if best is None or best.cost >= self._cost(self._rebuild(plan)):
            return self._rebuild(plan)
        position = {column: n for n, column in enumerate(best.columns)}
        exprs = tuple(bx.ColumnIndex(position[g], c.type) for g, c in enumerate(plan.schema))
        return lp.Project(best.plan, exprs, plan.schema)

    def _rebuild(self, plan: lp.Plan) -> lp.Plan:
        """The tree as written, with its non-join inputs rewritten."""
        if _is_inner(plan):
            return with_inputs(plan, [self._rebuild(child) for child in plan.inputs])
        return self.rewrite(plan)

    def _cost(self, plan: lp.Plan) -> float:
        if not _is_inner(plan):
            return 0.0
        estimate = self.estimator.estimate(plan)
        return estimate.bytes + estimate.work + sum(self._cost(child) for child in plan.inputs)

    def _best(self, leaves: list[lp.Plan], conditions: list[tuple[int, int]]) -> Optional[_Option]:
        offsets, start = [], 0
        for leaf in leaves:
            offsets.append(start)
            start += len(leaf.schema)
        best: dict[int, _Option] = {}
        for n, leaf in enumerate(leaves):
            best[1 << n] = _Option(0.0, leaf, tuple(range(offsets[n], offsets[n] + len(leaf.schema))))
        for subset in range(1, 1 << len(leaves)):
            if subset & (subset - 1):
                option = self._best_split(subset, best, conditions)
                if option is not None:
                    best[subset] = option
        return best.get((1 << len(leaves)) - 1)

    def _greedy(self, leaves: list[lp.Plan], conditions: list[tuple[int, int]]) -> Optional[_Option]:
        options, start = [], 0
        for leaf in leaves:
            options.append(_Option(0.0, leaf, tuple(range(start, start + len(leaf.schema)))))
            start += len(leaf.schema)
        while len(options) > 1:
            pairs = [(a, b) for a in range(len(options)) for b in range(len(options)) if a != b]
            joined = [(self._join(options[a], options[b], _keys(options[a].columns, options[b].columns, conditions)),
                       a, b) for a, b in pairs]
            connected = [j for j in joined if j[0].plan.left_keys] or joined
            best, a, b = min(connected, key=lambda j: j[0].cost)
            options = [o for n, o in enumerate(options) if n not in (a, b)] + [best]
        return options[0]

    def _best_split(self, subset: int, best: dict, conditions) -> Optional[_Option]:
        connected, crossing = [], []
        part = (subset - 1) & subset
        while part:
            rest = subset ^ part
            if part in best and rest in best:
                keys = _keys(best[part].columns, best[rest].columns, conditions)
                (connected if keys[0] else crossing).append(self._join(best[part], best[rest], keys))
            part = (part - 1) & subset
        options = connected or crossing
        return min(options, key=lambda o: o.cost) if options else None

    def _join(self, left: _Option, right: _Option, keys) -> _Option:
        join = lp.Join(left.plan, right.plan, "INNER", keys[0], keys[1], left.plan.schema + right.plan.schema)
        estimate = self.estimator.estimate(join)
        cost = left.cost + right.cost + estimate.bytes + estimate.work
        return _Option(cost, join, left.columns + right.columns)


def _keys(left: tuple[int, ...], right: tuple[int, ...], conditions) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Join key positions on each side for the conditions that connect the two column sets."""
    left_at = {g: n for n, g in enumerate(left)}
    right_at = {g: n for n, g in enumerate(right)}
    left_keys, right_keys = [], []
    for a, b in conditions:
        for x, y in ((a, b), (b, a)):
            if x in left_at and y in right_at:
                left_keys.append(left_at[x])
                right_keys.append(right_at[y])
    return tuple(left_keys), tuple(right_keys)


def _flatten(plan: lp.Plan, leaves: list, conditions: list, offset: int) -> int:
    """The inputs of a tree of inner joins, and its conditions as pairs of global column numbers."""
    if not _is_inner(plan):
        leaves.append(plan)
        return len(plan.schema)
    width = _flatten(plan.left, leaves, conditions, offset)
    right_width = _flatten(plan.right, leaves, conditions, offset + width)
    conditions.extend((offset + l, offset + width + r) for l, r in zip(plan.left_keys, plan.right_keys))
    return width + right_width
