"""A blocked order for an aggregate over a join whose groups do not fit in memory: bands of one input's key.

`SUM(MATMUL(A.v, B.v)) ... GROUP BY A.i, B.j` holds every output tile until its last product has
arrived; when the result is larger than the memory budget, the hash aggregate spills partial sums
(each output tile several times over). Grouped by a key of a stored tensor (A.i), the aggregate can
run instead once per band of that key's values: a band of A's rows joined with all of B, its groups
complete and handed on when the band ends, as the block-partitioned products of the tensor-relational
algebra do. B is read once per band and the partial sums do not spill. The physical planner offers this plan as
one more candidate, and the cost model chooses it when reading B again costs less than the spill.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.types import KEY

SHOWN_VALUES = 2  # EXPLAIN prints an IN-set of more keys than this that is a contiguous range as BETWEEN
BAND_SHARE = 0.5   # a band's groups and its build side (the band of the banded input) take this share of the
                   # budget together; scans, the other input's batches and the result take the rest


def banded(plan: lp.Aggregate, size: Callable[[lp.Plan], float], budget: float) -> Optional[lp.UnionAll]:
    """The aggregate as a UNION ALL of the same aggregate over bands of a grouped key, when its groups
    (`size(plan)` bytes) exceed `budget` and a group column is a key of a stored tensor joined directly."""
    result_bytes = size(plan)
    if not (isinstance(plan.input, lp.Join) and plan.input.kind == "INNER") or result_bytes <= budget or budget <= 0:
        return None  # (a budget of nothing, memory_limit of a byte: no band fits; the aggregate spills)
    join = plan.input
    found = _banded_side(plan, join)
    if found is None:
        return None
    side, key, extent = found
    held = result_bytes + size(join.left if side == "left" else join.right)
    bands = min(extent, math.ceil(held / (budget * BAND_SHARE)))
    if bands < 2:
        return None
    edges = [round(extent * b / bands) for b in range(bands + 1)]
    return lp.UnionAll(tuple(_band(plan, join, side, key, lo, hi) for lo, hi in zip(edges[:-1], edges[1:])
                             if hi > lo), plan.schema)


def _banded_side(plan: lp.Aggregate, join: lp.Join) -> Optional[tuple[str, int, int]]:
    """(side, key position, number of key values) of the first group column that is a key of a tensor scan
    on either side of the join."""
    width = len(join.left.schema)
    for expr in plan.group_by:
        if not isinstance(expr, bx.ColumnIndex):
            return None
        side, scan, column = ("left", join.left, expr.index) if expr.index < width else \
            ("right", join.right, expr.index - width)
        if isinstance(scan, lp.TensorScan) and column < len(scan.tensor.keys):
            return side, column, scan.tensor.grid[column]
    return None


def _band(plan: lp.Aggregate, join: lp.Join, side: str, key: int, lo: int, hi: int) -> lp.Aggregate:
    """The aggregate over the join with the banded side's tensor cut to keys lo..hi-1, as the join's build
    (right) side: the band is held while the other input streams past it. A band of the left input swaps
    the join's inputs, and the aggregate reads its columns where they then are."""
    if side == "right":
        kept = lp.Filter(join.right, _in_band(key, lo, hi))
        return lp.Aggregate(lp.with_inputs(join, [join.left, kept]), plan.group_by, plan.calls, plan.schema)
    left_width, right_width = len(join.left.schema), len(join.right.schema)
    moved = {c: c + right_width if c < left_width else c - left_width for c in range(left_width + right_width)}
    kept = lp.Filter(join.left, _in_band(key, lo, hi))
    residual = bx.remap_columns(join.residual, moved) if join.residual is not None else None
    swapped = lp.Join(join.right, kept, join.kind, join.right_keys, join.left_keys,
                      join.right.schema + join.left.schema, residual)
    return lp.Aggregate(swapped, tuple(bx.remap_columns(e, moved) for e in plan.group_by),
                        tuple(_remapped(call, moved) for call in plan.calls), plan.schema)


def _in_band(key: int, lo: int, hi: int) -> bx.Bound:
    """Keys lo..hi-1 as a set: the estimator narrows the key's distinct count to exactly the band's."""
    return bx.InSet(bx.ColumnIndex(key, KEY), frozenset(range(lo, hi)))


def band_text(predicate: bx.Bound, names: list[str]) -> Optional[str]:
    """`key BETWEEN lo AND hi` for a filter that keeps a contiguous range of more than a few values of a key
    column (a band's, which keeps them as a set for exact estimates), as EXPLAIN prints it; else None."""
    if not (isinstance(predicate, bx.InSet) and not predicate.negated and isinstance(predicate.arg, bx.ColumnIndex)
            and predicate.arg.type == KEY and len(predicate.values) > SHOWN_VALUES):
        return None
    values = predicate.values
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    lo, hi = min(values), max(values)
    if hi - lo + 1 != len(values):
        return None
    return f"{names[predicate.arg.index]} BETWEEN {lo} AND {hi}"


def _remapped(call: lp.AggregateCall, moved: dict[int, int]) -> lp.AggregateCall:
    return lp.AggregateCall(call.function, bx.remap_columns(call.arg, moved) if call.arg is not None else None)
