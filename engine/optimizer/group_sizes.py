"""At most how many input tuples one group of an aggregate over stored tensors (or a join of two) can have.

A stored tensor holds at most one tile per key, and its keys lie in its grid. So in `SUM(MATMUL(A.v,
B.v)) ... JOIN ON A.j = B.i GROUP BY A.i, B.j` a group (a, b) has one tuple per k where both A[a, k]
and B[k, b] are stored: at most min(A's and B's number of tiles along k). A group that has that many
is complete, and the aggregate hands it on at once instead of holding it to the end of its input
(the rest of the input still being computed while it travels on, to the driver of a Ray cluster
say). The bound holds whatever is stored (a missing tile makes a group smaller, never larger) and
whatever the filters and residual keep, so no statistics need to be exact.
"""
from __future__ import annotations

import math
from typing import Optional

from trdb.planner import expressions as bx
from trdb.planner import logical as lp


def rows_per_group(plan: lp.Aggregate) -> Optional[int]:
    """The bound for `plan`, or None when its input is not a (filtered) tensor scan or an inner join of
    two, grouped by plain columns."""
    if not plan.group_by or not all(isinstance(g, bx.ColumnIndex) for g in plan.group_by):
        return None
    extents, equal = _inputs(plan.input)
    if extents is None:
        return None
    classes = {position: position for position in extents}  # key columns made equal by the join

    def find(position: int) -> int:
        while classes[position] != position:
            position = classes[position]
        return position

    for l, r in equal:
        classes[find(l)] = find(r)
    grouped = {find(g.index) for g in plan.group_by if g.index in extents}
    free: dict[int, int] = {}
    for position, extent in extents.items():
        root = find(position)
        if root not in grouped:
            free[root] = min(free.get(root, extent), extent)
    return math.prod(free.values()) or None


def _inputs(plan: lp.Plan) -> tuple[Optional[dict[int, int]], list[tuple[int, int]]]:
    """The number of tiles along each key column of the aggregate's input (by position), and the pairs
    of positions an inner join makes equal; (None, []) for any other input."""
    scanned = _stored(plan)
    if scanned is not None:
        return _key_extents(scanned, 0), []
    if not isinstance(plan, lp.Join) or plan.kind != "INNER":
        return None, []
    left, right = _stored(plan.left), _stored(plan.right)
    if left is None or right is None:
        return None, []
    width = len(plan.left.schema)
    extents = {**_key_extents(left, 0), **_key_extents(right, width)}
    equal = [(l, width + r) for l, r in zip(plan.left_keys, plan.right_keys)]
    if not all(l in extents and r in extents for l, r in equal):
        return None, []
    return extents, equal


def _stored(plan: lp.Plan):
    """The tensor a side of the join scans, under any filters; None if it is anything else."""
    while isinstance(plan, lp.Filter):
        plan = plan.input
    return plan.tensor if isinstance(plan, lp.TensorScan) else None


def _key_extents(tensor, offset: int) -> dict[int, int]:
    """The join's output position of each key column of `tensor`, and its number of tiles."""
    return {offset + d: extent for d, extent in enumerate(tensor.grid)}
