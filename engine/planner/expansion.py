"""What the binder hands on instead of building itself: EINSUM's decomposition and GRAD's gradient plan.

Both need layers above the planner (the optimizer's cost model, autodiff); the query pipeline
gives the binder these two functions through its BindContext.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from trdb.planner import logical as lp
from trdb.storage.tensor_meta import TensorMeta


@dataclass(frozen=True)
class Expansions:
    einsum: Callable[[Any, Any], lp.Plan]              # (binder, EinsumRef) -> the plan of its steps
    gradient: Callable[[lp.Plan, TensorMeta], lp.Plan]  # (loss plan, parameter) -> d loss / d parameter
