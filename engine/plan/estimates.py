"""What the optimizer expects of an operator (tuples, bytes, distinct values, FLOPs): plan data a physical node carries."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from trdb.config.unit_costs import ELEMENT_COST, TUPLE_COST_FLOPS


@dataclass(frozen=True)
class Estimate:
    """Expected output tuples, bytes per tuple, distinct values per column, and the operator's own FLOPs.

    `fill` says per column what its stored tiles cost against dense ones (1.0, or empty: all dense):
    CSR tiles hold and compute on their non-zeros only.
    """

    rows: float
    row_bytes: float
    distinct: tuple[Optional[float], ...]
    flops: float = 0.0
    fill: tuple[float, ...] = ()
    written: float = 0.0  # elements its kernels write (each result tile; an aggregate's additions)

    @property
    def work(self) -> float:
        """The operator's compute in cost units: BLAS-rate FLOPs plus memory-rate written elements."""
        return self.flops + ELEMENT_COST * self.written

    @property
    def cost(self) -> float:
        """The operator's cost on one worker: its compute and a cost per output tuple."""
        return self.work + self.rows * TUPLE_COST_FLOPS

    @property
    def bytes(self) -> float:
        return self.rows * self.row_bytes
