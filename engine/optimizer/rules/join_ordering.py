"""join_ordering: a tree of three or more inner joins is re-ordered by dynamic programming over estimated cost.

The binder joins FROM items left to right. Here a maximal tree of inner key-equality joins is
flattened into its inputs and conditions; every subset of inputs gets its cheapest plan (the
estimated bytes of all intermediate results, from the cardinality estimates, plus their FLOPs),
splits that share no condition are only used when nothing else connects; the cheapest plan of all
inputs replaces the tree when it is cheaper, under a projection that restores the column order.
Exact up to MAX_EXACT inputs; larger trees are ordered greedily (greedy operator ordering: join
the connected pair whose join costs least, replace the pair by its join, repeat), which considers
O(inputs x (inputs + conditions)) joins, so planning stays polynomial for hundreds of joins. Every
join considered counts as one state in `RuleContext.states["join_ordering"]`, and the search stops
with QueryCancelled when the statement is cancelled.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from trdb.optimizer.cardinality import Estimator
from trdb.plan import expressions as bx
from trdb.plan import logical as lp

MAX_EXACT = 10


@dataclass(frozen=True)
class _Option:
    cost: float
    plan: lp.Plan
    columns: tuple[int, ...]   # the original (global) column number of each output column


def join_ordering(plan: lp.Plan, context) -> lp.Plan:
    """Every maximal tree of inner joins in its cheapest order."""
    orderer = _Orderer(Estimator(getattr(context, "catalog", None)), getattr(context, "check", None))
    try:
        return orderer.rewrite(plan)
    finally:
        count = getattr(context, "count_states", None)
        if count is not None:
            count("join_ordering", orderer.states)


def _is_inner(plan: lp.Plan) -> bool:
    return isinstance(plan, lp.Join) and plan.kind == "INNER" and plan.residual is None


class _Orderer:
    def __init__(self, estimator: Estimator, check: Optional[Callable[[], None]] = None):
        self.estimator = estimator
        self._done: dict[int, tuple[lp.Plan, lp.Plan]] = {}
        self.states = 0  # joins considered: the size of the search
        self._check = check or (lambda: None)

    def rewrite(self, plan: lp.Plan) -> lp.Plan:
        done = self._done.get(id(plan))
        if done is None or done[0] is not plan:
            done = (plan, self._rewrite(plan))
            self._done[id(plan)] = done
        return done[1]

    def _rewrite(self, plan: lp.Plan) -> lp.Plan:
        if not _is_inner(plan):
            return lp.with_inputs(plan, [self.rewrite(child) for child in plan.inputs])
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
            return lp.with_inputs(plan, [self._rebuild(child) for child in plan.inputs])
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
            self._check()
            if subset & (subset - 1):
                option = self._best_split(subset, best, conditions)
                if option is not None:
                    best[subset] = option
        return best.get((1 << len(leaves)) - 1)

    def _greedy(self, leaves: list[lp.Plan], conditions: list[tuple[int, int]]) -> Optional[_Option]:
        """Greedy operator ordering: repeatedly join the connected pair whose join costs least.

        Candidates are ranked by a light estimate (rows, bytes and the distinct values of condition
        columns only: the formulas of Estimator._Join), so that each costs O(keys), not O(columns).
        """
        owner, firsts, start = {}, [], 0  # owner: global column -> the leaf holding it
        for n, leaf in enumerate(leaves):
            owner.update((column, n) for column in range(start, start + len(leaf.schema)))
            firsts.append(start)
            start += len(leaf.schema)
        touching: list[set[int]] = [set() for _ in leaves]
        for c, (a, b) in enumerate(conditions):
            if owner[a] != owner[b]:
                touching[owner[a]].add(c)
                touching[owner[b]].add(c)
        options = {n: self._light_leaf(leaf, firsts[n], touching[n], conditions)
                   for n, leaf in enumerate(leaves)}
        pairs: dict[tuple[int, int], tuple[float, float]] = {}
        for n in options:
            self._pair_up(n, options, conditions, pairs)
        while len(options) > 1:
            self._check()
            a, b = self._cheapest(options, conditions, pairs)
            new = max(options) + 1
            options[new] = self._merge(options.pop(a), options.pop(b), conditions)
            for key in [k for k in pairs if a in k or b in k]:
                del pairs[key]
            self._pair_up(new, options, conditions, pairs)
        return next(iter(options.values())).option

    def _light_leaf(self, leaf: lp.Plan, first: int, touching: set[int], conditions) -> "_Light":
        estimate = self.estimator.estimate(leaf)
        option = _Option(0.0, leaf, tuple(range(first, first + len(leaf.schema))))
        distinct = {g: estimate.distinct[g - first] for c in touching for g in conditions[c]
                    if first <= g < first + len(leaf.schema)}
        return _Light(option, estimate.rows, estimate.row_bytes, distinct, touching)

    def _pair_up(self, n: int, options: dict, conditions, pairs: dict) -> None:
        """Light costs of joining option n with every option it shares a condition with, both ways round."""
        for m in options:
            shared = options[n].touching & options[m].touching
            if m != n and shared:
                for a, b in ((n, m), (m, n)):
                    pairs[(a, b)] = _light_join(options[a], options[b], shared, conditions)
                    self.states += 1

    def _cheapest(self, options: dict, conditions, pairs: dict) -> tuple[int, int]:
        if pairs:
            return min(pairs, key=lambda pair: pairs[pair][0])
        # nothing connects: a cross product, starting from the option with the fewest tuples
        smallest = min(options, key=lambda n: options[n].rows)
        others = [m for m in options if m != smallest]
        self.states += len(others)
        return smallest, min(others, key=lambda m: _light_join(options[smallest], options[m], set(), conditions)[0])

    def _merge(self, left: "_Light", right: "_Light", conditions) -> "_Light":
        shared = left.touching & right.touching
        option = self._join(left.option, right.option, _shared_keys(left.option.columns, right.option.columns,
                                                                    shared, conditions))
        rows = _light_join(left, right, shared, conditions)[1]
        touching = left.touching ^ right.touching
        known = {**left.distinct, **right.distinct}
        distinct = {g: (min(known[g], rows) if known[g] is not None else None)
                    for c in touching for g in conditions[c] if g in known}
        return _Light(option, rows, left.row_bytes + right.row_bytes, distinct, touching)

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
        self.states += 1
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


@dataclass(frozen=True)
class _Light:
    """A partial plan of the greedy search, with what its joins' light estimates need."""

    option: _Option
    rows: float
    row_bytes: float
    distinct: dict  # global column -> distinct values (None: unknown), for condition columns only
    touching: set   # conditions with exactly one end in this partial plan


def _light_join(left: _Light, right: _Light, shared: set, conditions) -> tuple[float, float]:
    """(cost, rows) of an inner join without residual, by the formulas of Estimator._Join."""
    rows = left.rows * right.rows
    for c in sorted(shared):
        a, b = conditions[c]
        known = [d for d in (left.distinct.get(a, right.distinct.get(a)), left.distinct.get(b, right.distinct.get(b)))
                 if d]
        rows /= max(known) if known else 10.0
    return left.option.cost + right.option.cost + rows * (left.row_bytes + right.row_bytes), rows


def _shared_keys(left: tuple[int, ...], right: tuple[int, ...], shared: set[int],
                 conditions) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """_keys over only the conditions in `shared` (those that connect the two sides), in their order."""
    return _keys(left, right, [conditions[c] for c in sorted(shared)])


def _flatten(plan: lp.Plan, leaves: list, conditions: list, offset: int) -> int:
    """The inputs of a tree of inner joins, and its conditions as pairs of global column numbers."""
    if not _is_inner(plan):
        leaves.append(plan)
        return len(plan.schema)
    width = _flatten(plan.left, leaves, conditions, offset)
    right_width = _flatten(plan.right, leaves, conditions, offset + width)
    conditions.extend((offset + l, offset + width + r) for l, r in zip(plan.left_keys, plan.right_keys))
    return width + right_width
