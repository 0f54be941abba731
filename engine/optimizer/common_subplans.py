"""Common subplans: the numbering that finds a subplan occurring more than once in a statement.

Gradient plans repeat their forward pass (every derivative rule re-reads its operator's input);
so may views used twice. Repeated subplans are found by hash-consing (equal subplans get one
number, computed bottom-up, so each node is hashed once). pipeline/shared_work.py runs each once,
keeps its tuples in a spool (in memory while the budget allows, else spilled) and replaces each
occurrence by a scan of those tuples: the optimizer numbers and rewrites, it never runs a plan.
"""
from __future__ import annotations

import itertools
from typing import Optional

from trdb.optimizer.subsumed_projections import merge_rekeys, read_subsuming_all
from trdb.plan import logical as lp


def sharing_projections(plans: list[lp.Plan]) -> list[lp.Plan]:
    """Plans to run together with one SharedWork (`expect`), each Project that another computes more of
    reading that one, so that it is shared (as `rewrite` does within one plan)."""
    return read_subsuming_all([merge_rekeys(plan) for plan in plans], Numbering().number)


class Numbering:
    """Equal subplans get equal numbers; one holding something unhashable (a constant holding an array) is
    equal only to itself (the same object), as a RowsScan is.

    Subplans are remembered by identity, each numbered once. Those over a statement's own data (tuples
    it computed, a constant holding an array) are remembered only until `next_statement`: kept longer,
    they would keep that data alive; a RowsScan and an unhashable subplan are known by a token never
    given to another."""

    def __init__(self) -> None:
        self._by_signature: dict = {}
        self._lasting: dict[int, tuple[object, int]] = {}
        self._statement: dict[int, tuple[object, Optional[int]]] = {}
        self._tokens = itertools.count()

    def size(self) -> int:
        return len(self._by_signature)

    def next_statement(self) -> None:
        self._statement = {}

    def number(self, plan) -> Optional[int]:
        return self._numbered(plan)[0]

    def _numbered(self, plan) -> tuple[Optional[int], bool]:
        """The subplan's number, and whether it may be remembered past this statement."""
        for remembered, lasting in ((self._lasting, True), (self._statement, False)):
            known = remembered.get(id(plan))
            if known is not None and known[0] is plan:
                return known[1], lasting
        signature, lasting = self._signature(plan)
        result = None if signature is None else self._by_signature.setdefault(signature, len(self._by_signature))
        lasting = lasting and result is not None
        (self._lasting if lasting else self._statement)[id(plan)] = (plan, result)
        return result, lasting

    def _signature(self, plan) -> tuple[Optional[tuple], bool]:
        if isinstance(plan, lp.RowsScan):
            return ("materialized", next(self._tokens)), False
        children = [self._numbered(child) for child in plan.inputs]
        fields = [value for _, value in lp.attributes(plan)]
        signature = (type(plan), tuple(fields), tuple(number for number, _ in children))
        try:
            hash(signature)
        except TypeError:  # a constant holding an array: equal only to itself, read twice (a CTE's plan, bound once
            # for all its readers) it is still computed once
            return ("unhashable", next(self._tokens)), False
        return signature, all(lasting for _, lasting in children)
