"""Two-phase aggregation: which aggregates split into a partial and a final step, and the final calls."""
from __future__ import annotations

from trdb.plan import expressions as bx
from trdb.plan import logical as lp

# partial function -> the function that combines partial results
_FINAL = {"SUM": "SUM", "COUNT": "SUM_COUNTS", "MIN": "MIN", "MAX": "MAX"}


def splittable(plan: lp.Aggregate) -> bool:
    """AVG needs a sum and a count carried separately; the others combine their own partials."""
    return all(call.function in _FINAL for call in plan.calls)


def final_calls(plan: lp.Aggregate) -> tuple[lp.AggregateCall, ...]:
    """The calls that combine partial results laid out as the partial aggregate's output columns."""
    width = len(plan.group_by)
    return tuple(lp.AggregateCall(_FINAL[call.function], bx.ColumnIndex(width + n, plan.schema[width + n].type))
                 for n, call in enumerate(plan.calls))
