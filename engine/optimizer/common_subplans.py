"""Common subplans: a subplan that occurs more than once in a statement is computed once.

Gradient plans repeat their forward pass (every derivative rule re-reads its operator's input);
so may views used twice. Repeated subplans are found by hash-consing (equal subplans get one
number, computed bottom-up, so each node is hashed once), run once, their tuples kept in memory,
and each occurrence replaced by a scan of those tuples.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Callable, Optional

from trdb.planner import logical as lp

_CHILD_FIELDS = ("input", "left", "right")


class _Numbering:
    """Equal subplans get equal numbers (None: a subplan holding something unhashable, never shared)."""

    def __init__(self) -> None:
        self._by_signature: dict = {}
        self._by_node: dict[int, tuple[object, Optional[int]]] = {}

    def number(self, plan) -> Optional[int]:
        known = self._by_node.get(id(plan))
        if known is not None and known[0] is plan:
            return known[1]
        signature = self._signature(plan)
        result = None
        if signature is not None:
            result = self._by_signature.setdefault(signature, len(self._by_signature))
        self._by_node[id(plan)] = (plan, result)
        return result

    def _signature(self, plan) -> Optional[tuple]:
        if isinstance(plan, lp.Materialized):
            return ("materialized", id(plan))
        children = [self.number(child) for child in plan.inputs]
        if None in children:
            return None
        fields = [getattr(plan, f.name) for f in dataclasses.fields(plan)
                  if f.name not in _CHILD_FIELDS and f.name != "parts"]
        signature = (type(plan), tuple(fields), tuple(children))
        try:
            hash(signature)
        except TypeError:  # a constant holding an array
            return None
        return signature


def _with_children(plan, children: list):
    if isinstance(plan, lp.UnionAll):
        return dataclasses.replace(plan, parts=tuple(children))
    names = [f.name for f in dataclasses.fields(plan) if f.name in _CHILD_FIELDS]
    return dataclasses.replace(plan, **dict(zip(names, children)))


class SharedWork:
    """Tuples of repeated subplans, computed once by `run` and reused (within a statement or a step)."""

    def __init__(self, run: Callable[[lp.Plan], list]):
        self.run = run
        self.numbering = _Numbering()
        self.memo: dict[int, lp.Materialized] = {}
        self.counts: Counter = Counter()

    def expect(self, plans: list[lp.Plan]) -> None:
        """Count the subplans of plans to be run later with this object: what they share runs once."""
        for plan in plans:
            self._count(plan, self.counts)

    def rewrite(self, plan: lp.Plan) -> lp.Plan:
        """`plan` with its repeated subplans (counted now, or by `expect` already) replaced by their tuples."""
        counts = self.counts
        if not counts:
            counts = Counter()
            self._count(plan, counts)
        return self._rewrite(plan, counts)

    def _count(self, plan, counts: Counter) -> None:
        number = self.numbering.number(plan)
        if number is not None:
            counts[number] += 1
            if counts[number] > 1:
                return  # its interior was counted with its first occurrence
        for child in plan.inputs:
            self._count(child, counts)

    def _rewrite(self, plan, counts: Counter):
        number = self.numbering.number(plan)
        if number is not None and number in self.memo:
            return self.memo[number]
        children = [self._rewrite(child, counts) for child in plan.inputs]
        changed = any(new is not old for new, old in zip(children, plan.inputs))
        rebuilt = _with_children(plan, children) if changed else plan
        if number is not None and counts[number] > 1 and not isinstance(plan, (lp.Scan, lp.TableScan,
                                                                                  lp.Materialized)):
            self.memo[number] = lp.Materialized(self.run(rebuilt), plan.schema)
            return self.memo[number]
        return rebuilt
