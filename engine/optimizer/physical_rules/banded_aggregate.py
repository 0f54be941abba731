"""Physical rule banded_aggregate: a product whose result does not fit in memory_limit run in bands of one input's key."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from trdb.optimizer.banded_aggregate import banded
from trdb.plan import logical as lp
from trdb.plan.physical import PhysicalNode

if TYPE_CHECKING:
    from trdb.optimizer.physical_planner import PhysicalPlanner


def banded_aggregate(planner: "PhysicalPlanner", plan: lp.Aggregate, want: Optional[tuple[int, ...]]) -> Optional[PhysicalNode]:
    """The aggregate as a UNION ALL of bands (optimizer/banded_aggregate.py: each band reads the other input
    again, and its groups fit), or None where it is not a product that spills."""
    bands = banded(plan, lambda p: planner.estimator.estimate(p).bytes, planner.memory_share * planner.workers)
    if bands is None:
        return None
    # EXPLAIN says how many: each band reads the other input (and this one) again
    return replace(planner.union_all(bands, want), detail=f"{len(bands.parts)} bands")
