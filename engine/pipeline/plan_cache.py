"""Physical plans of queries, reused while the text, parameters, settings and catalog are unchanged.

Binding, optimizing and physical planning cost about as much as running a small query; a
repeated query (a loop in a client, a dashboard) plans once. The key holds the catalog's version,
which every DDL, data write and rollback advances: a plan chosen from old statistics is never reused.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from trdb.plan.physical import PhysicalNode
from trdb.plan.types import Schema

_CACHEABLE_PARAMS = (int, float, str, bool, type(None))


@dataclass(frozen=True)
class CachedPlan:
    node: PhysicalNode
    schema: Schema


class PlanCache:
    """A least-recently-used map from a query's key to its physical plan."""

    def __init__(self, size: int = 256):
        self.size = size
        self._plans: OrderedDict[tuple, CachedPlan] = OrderedDict()

    @staticmethod
    def key(text: str, params: Sequence[Any], settings: tuple, catalog_version: int) -> Optional[tuple]:
        """The cache key, or None when a parameter (an array, a table) cannot be part of one."""
        if not all(isinstance(p, _CACHEABLE_PARAMS) for p in params):
            return None
        return text, tuple((type(p), p) for p in params), settings, catalog_version

    def get(self, key: Optional[tuple]) -> Optional[CachedPlan]:
        plan = self._plans.get(key) if key is not None else None
        if plan is not None:
            self._plans.move_to_end(key)
        return plan

    def put(self, key: Optional[tuple], plan: CachedPlan) -> None:
        if key is None:
            return
        self._plans[key] = plan
        if len(self._plans) > self.size:
            self._plans.popitem(last=False)
