"""Projections that compute what another projection of the same input computes read it instead.

A gradient's forward pass appears twice: as the query wrote it (`hidden`: keys and RELU(sum)) and
with lineage columns added for the backward pass (the same keys and RELU(sum), plus copies of the
keys). Both apply the same kernel to the same shared input, so RELU would run twice. Here a
projection over plain column references is first merged into the projection above it (both then
read the shared input directly), and a projection whose every expression another projection of
the same input also computes becomes a choice of that projection's columns: the larger one then
occurs twice and is computed once, as a shared subplan.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Optional

from trdb.optimizer.plan_rewrite import contains_call
from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.expressions import substitute


def merge_rekeys(plan: lp.Plan, done: Optional[dict] = None) -> lp.Plan:
    """`plan` with each Project over a Project of column references merged into one Project. A subplan read
    twice (one object) is rewritten once and stays one object (`done`, by identity): rebuilt for each
    reader, a CTE that joins the one before it with itself would double in size per level."""
    done = {} if done is None else done
    known = done.get(id(plan))
    if known is not None:
        return known[1]
    merged = lp.with_inputs(plan, [merge_rekeys(child, done) for child in plan.inputs])
    if isinstance(merged, lp.Project) and isinstance(merged.input, lp.Project) \
            and all(isinstance(e, bx.ColumnIndex) for e in merged.input.exprs):
        merged = lp.Project(merged.input.input, tuple(substitute(e, merged.input.exprs) for e in merged.exprs),
                            merged.schema)
    done[id(plan)] = (plan, merged)  # the plan kept alive with its id
    return merged


def read_subsuming(plan: lp.Plan, number: Callable[[lp.Plan], Optional[int]]) -> lp.Plan:
    """`plan` with each Project that runs a kernel, and whose expressions a larger Project of the same
    input (by subplan `number`) all computes, rewritten as a Project of that one's columns."""
    return read_subsuming_all([plan], number)[0]


def read_subsuming_all(plans: list[lp.Plan], number: Callable[[lp.Plan], Optional[int]]) -> list[lp.Plan]:
    """`read_subsuming` over plans run together (MINIMIZE's loss and gradients): a Project of one may
    read a larger one of another."""
    by_input: dict[int, list[lp.Project]] = defaultdict(list)
    seen: set = set()
    for plan in plans:
        _collect(plan, number, by_input, seen)
    done: dict = {}
    return [_rewrite(plan, number, by_input, done) for plan in plans]


def _collect(plan, number, by_input: dict, seen: set) -> None:
    if id(plan) in seen:
        return
    seen.add(id(plan))
    if isinstance(plan, lp.Project) and any(contains_call(e) for e in plan.exprs):
        key = number(plan.input)
        if key is not None and _hashable(plan.exprs):
            by_input[key].append(plan)
    for child in plan.inputs:
        _collect(child, number, by_input, seen)


def _rewrite(plan, number, by_input: dict, done: dict):
    if id(plan) in done:
        return done[id(plan)]
    rebuilt = lp.with_inputs(plan, [_rewrite(child, number, by_input, done) for child in plan.inputs])
    if isinstance(plan, lp.Project):
        # found by its input as it was (what is below both may have been rewritten since: both alike), and
        # read as rewritten, so that both plans hold the same subplan
        larger = _subsuming(plan, by_input.get(number(plan.input), ()))
        if larger is not None:
            columns = tuple(bx.ColumnIndex(larger.exprs.index(e), larger.schema[larger.exprs.index(e)].type)
                            for e in plan.exprs)
            rebuilt = lp.Project(_rewrite(larger, number, by_input, done), columns, plan.schema)
    done[id(plan)] = rebuilt
    return rebuilt


def _subsuming(plan: lp.Project, candidates) -> Optional[lp.Project]:
    if not any(contains_call(e) for e in plan.exprs) or not _hashable(plan.exprs):
        return None
    wanted = set(plan.exprs)
    for other in candidates:
        if other is not plan and len(other.exprs) > len(plan.exprs) and wanted <= set(other.exprs):
            return other
    return None


def _hashable(exprs: tuple) -> bool:
    try:
        hash(exprs)
    except TypeError:  # a constant holding an array
        return False
    return True
