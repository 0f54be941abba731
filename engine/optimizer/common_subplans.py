"""Common subplans: a subplan that occurs more than once in a statement is computed once.

Gradient plans repeat their forward pass (every derivative rule re-reads its operator's input);
so may views used twice. The largest repeated subplans are run first, their tuples kept in
memory, and each occurrence is replaced by a scan of those tuples.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Callable, Optional

from trdb.planner import logical as lp

_CHILD_FIELDS = ("input", "left", "right")


def _children(plan) -> tuple:
    return plan.inputs


def _key(plan) -> Optional[object]:
    """The plan itself as a dictionary key (plans are frozen dataclasses), or None if unhashable."""
    try:
        hash(plan)
    except TypeError:  # a constant holding an array
        return None
    return plan


def count_subplans(plan, counts: Counter) -> None:
    key = _key(plan)
    if key is not None:
        counts[key] += 1
        if counts[key] > 1:
            return  # its interior was counted with its first occurrence
    for child in _children(plan):
        count_subplans(child, counts)


def _worth_sharing(plan) -> bool:
    return not isinstance(plan, (lp.Scan, lp.TableScan, lp.Materialized))


def _with_children(plan, children: list):
    if isinstance(plan, lp.UnionAll):
        return dataclasses.replace(plan, parts=tuple(children))
    fields = [f for f in _CHILD_FIELDS if hasattr(plan, f) and f in {x.name for x in dataclasses.fields(plan)}]
    return dataclasses.replace(plan, **dict(zip(fields, children)))


class SharedWork:
    """Tuples of repeated subplans, computed once by `run` and reused (within a statement or a step)."""

    def __init__(self, run: Callable[[lp.Plan], list]):
        self.run = run
        self.memo: dict = {}

    def rewrite(self, plan: lp.Plan) -> lp.Plan:
        counts: Counter = Counter()
        count_subplans(plan, counts)
        return self._rewrite(plan, counts)

    def _rewrite(self, plan, counts: Counter):
        key = _key(plan)
        if key is not None and key in self.memo:
            return self.memo[key]
        children = [self._rewrite(child, counts) for child in _children(plan)]
        rebuilt = _with_children(plan, children) if any(c is not o for c, o in zip(children, _children(plan))) \
            else plan
        if key is not None and counts[key] > 1 and _worth_sharing(plan):
            self.memo[key] = lp.Materialized(self.run(rebuilt), plan.schema)
            return self.memo[key]
        return rebuilt
