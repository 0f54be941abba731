"""At most how many input tuples one group of an aggregate can have, from the keys its input is unique on.

A stored tensor holds at most one tile per key, and its keys lie in its grid. So in `SUM(MATMUL(A.v,
B.v)) ... JOIN ON A.j = B.i GROUP BY A.i, B.j` a group (a, b) has one tuple per k where both A[a, k]
and B[k, b] are stored: at most min(A's and B's number of tiles along k). A group that has that many
is complete, and the aggregate hands it on at once instead of holding it to the end of its input
(the rest of the input still being computed while it travels on, to the driver of a Ray cluster
say); a bound of one makes the aggregate a projection (rules/single_row_groups.py).

The same reasoning runs through whole plans: every plan node's tuples are unique on a set of key
*slots*, each with an extent (its number of possible values, None when not bounded) and the output
columns that hold it. A tensor scan's slots are its keys; an inner join's tuples are unique on both
sides' slots, with the slots its key equalities join made one (of the smaller extent); a projection
keeps the slots, naming the columns that still hold them (a dropped key is a hidden slot); an
aggregate's tuples are unique on its group keys. The bound holds whatever is stored (a missing tile
makes a group smaller, never larger) and whatever the filters and residual keep, so no statistics
need to be exact.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from trdb.plan import expressions as bx
from trdb.plan import logical as lp


@dataclass(frozen=True)
class KeySlots:
    """The tuples are unique on the slots; `extents[s]` is slot s's number of values (None: unbounded),
    `at[position]` the slot an output column holds."""

    extents: tuple[Optional[int], ...]
    at: dict[int, int]


def rows_per_group(plan: lp.Aggregate, memo: Optional[dict] = None) -> Optional[int]:
    """The bound for `plan`, or None when none is known (no group keys, an input of unknown keys, or a
    hidden slot without an extent). `memo`: shared by the calls of one rewrite of a plan (by node id)."""
    if not plan.group_by:
        return None
    slots = key_slots(plan.input, {} if memo is None else memo)
    if slots is None:
        return None
    grouped = {slots.at[g.index] for g in plan.group_by if isinstance(g, bx.ColumnIndex) and g.index in slots.at}
    free = [extent for slot, extent in enumerate(slots.extents) if slot not in grouped]
    if any(extent is None for extent in free):
        return None
    return math.prod(free) or None


def key_slots(plan: lp.Plan, memo: dict) -> Optional[KeySlots]:
    """The key slots of `plan`'s tuples, or None when they are not known (a leaf other than a tensor
    scan, an outer join, a union). A plan shares subplans: each node is derived once (`memo`, which
    holds the node too, so that its id is not reused while the memo lives)."""
    found = memo.get(id(plan))
    if found is None:
        found = memo[id(plan)] = (plan, _derive(plan, memo))
    return found[1]


def _derive(plan: lp.Plan, memo: dict) -> Optional[KeySlots]:
    if isinstance(plan, lp.TensorScan):
        return KeySlots(tuple(plan.tensor.grid), {d: d for d in range(len(plan.tensor.grid))})
    if isinstance(plan, lp.RowsScan):
        return plan.keys  # a shared subplan's tuples: its slots were derived before it ran
    if isinstance(plan, (lp.Filter, lp.Sort, lp.Limit)):
        return key_slots(plan.input, memo)  # a subset of the input's tuples
    if isinstance(plan, lp.Project):
        inner = key_slots(plan.input, memo)
        if inner is None:
            return None
        return KeySlots(inner.extents, {p: inner.at[e.index] for p, e in enumerate(plan.exprs)
                                        if isinstance(e, bx.ColumnIndex) and e.index in inner.at})
    if isinstance(plan, lp.Join) and plan.kind == "INNER":
        return _joined(plan, key_slots(plan.left, memo), key_slots(plan.right, memo))
    if isinstance(plan, lp.Aggregate):
        return _grouped(plan, key_slots(plan.input, memo))
    return None


def _joined(plan: lp.Join, left: Optional[KeySlots], right: Optional[KeySlots]) -> Optional[KeySlots]:
    """A pair of tuples is unique on both sides' slots; a key equality makes its two slots one."""
    if left is None or right is None:
        return None
    width, offset = len(plan.left.schema), len(left.extents)
    parent = list(range(offset + len(right.extents)))
    extents = list(left.extents + right.extents)

    def find(slot: int) -> int:
        while parent[slot] != slot:
            slot = parent[slot]
        return slot

    for l, r in zip(plan.left_keys, plan.right_keys):
        if l in left.at and r in right.at:
            a, b = find(left.at[l]), find(offset + right.at[r])
            if a != b:
                parent[a] = b
                extents[b] = extents[a] if extents[b] is None else extents[b] if extents[a] is None \
                    else min(extents[a], extents[b])
    roots = sorted({find(slot) for slot in range(len(parent))})
    number = {root: n for n, root in enumerate(roots)}
    at = {**left.at, **{width + p: offset + s for p, s in right.at.items()}}
    return KeySlots(tuple(extents[root] for root in roots), {p: number[find(s)] for p, s in at.items()})


def _grouped(plan: lp.Aggregate, inner: Optional[KeySlots]) -> KeySlots:
    """An aggregate's tuples are unique on its group keys (none: one tuple); a key that is a slot of the
    input keeps that slot's extent."""
    extents: list[Optional[int]] = []
    at: dict[int, int] = {}
    seen: dict[int, int] = {}
    for position, key in enumerate(plan.group_by):
        source = inner.at.get(key.index) if inner is not None and isinstance(key, bx.ColumnIndex) else None
        if source is None:
            at[position] = len(extents)
            extents.append(None)
            continue
        if source not in seen:
            seen[source] = len(extents)
            extents.append(inner.extents[source])
        at[position] = seen[source]
    return KeySlots(tuple(extents), at)
