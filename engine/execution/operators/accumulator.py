"""An aggregate call's running state in one group (Accumulator): a tile folded in at a time, dense or CSR, as SUM,
AVG, MIN or MAX; COUNT counts. HashAggregateExec keeps one a call in each group of its dict."""
from __future__ import annotations

from typing import Optional

import numpy as np

from trdb.errors import DataError
from trdb.execution.work import charge_add
from trdb.kernels import sparse_functions as S
from trdb.kernels.sparse import add_into, dense, is_sparse, nbytes, settle
from trdb.plan.types import TensorType


class Growth:
    """Bytes the groups grew by since the operator last asked its reservation for them. Counted where
    a tile is first held or replaced by a bigger one (a CSR sum), never per row of a dense sum."""

    __slots__ = ("bytes",)

    def __init__(self):
        self.bytes = 0


class Accumulator:
    """The running state of one aggregate call in one group: `value` (a tile or scalar) and `count`;
    `key`: the group's, where the group's sum is placed in the result's array (execution/result_canvas.py)."""

    __slots__ = ("function", "value", "count", "growth", "key", "order")

    def __init__(self, function: str, growth: Optional[Growth] = None):
        self.function = function
        self.value = None
        self.count = 0
        self.growth = growth
        self.key = None
        self.order = None  # a GroupOrder where its products are shared with sibling instances

    @property
    def rows(self) -> int:
        """The rows fed to it: those added, and its products not yet added (tile_math/product_sharing.py)."""
        return self.count + (self.order.pending if self.order is not None else 0)

    def add(self, value, xp, owned: bool = False) -> None:
        """Fold in one tile; `owned`: it is a fresh kernel result that no one else holds (not copied)."""
        self.count += 1
        if self.function != "COUNT" and value is not None:
            self._fold(value, xp, owned)

    def absorb(self, value, count: int, xp) -> None:
        """Fold in another state of this call (a partial result read back from a spill file; owned)."""
        self.count += count
        if self.function != "COUNT" and value is not None:
            self._fold(value, xp, True)

    def _fold(self, value, xp, owned: bool) -> None:
        acc = self.value
        if acc is None:
            copy = not owned and hasattr(value, "copy") and getattr(value, "ndim", 0)
            self.value = value.copy() if copy else value
            if self.growth is not None:
                self.growth.bytes += nbytes(self.value)
            return
        try:
            combined = self._combine(acc, value, xp)
            charge_add(value)
        except ValueError:  # the larger shape first, whichever tile came first (workers hand them on in any order)
            larger, smaller = sorted((np.shape(acc), np.shape(value)), reverse=True)
            raise DataError(f"{self.function}: tiles of one group have shapes {larger} and {smaller}") from None
        if combined is not acc and self.growth is not None and (is_sparse(combined) or is_sparse(acc)):
            self.growth.bytes += nbytes(combined) - nbytes(acc)  # a CSR sum grows; a dense one stays in place
        self.value = combined

    def _combine(self, acc, value, xp):
        if np.shape(acc) != np.shape(value):
            raise ValueError("tiles of one group must have one shape")  # never broadcast one onto another
        if self.function in ("SUM", "AVG", "SUM_COUNTS"):
            return _sum(acc, value, xp)
        if is_sparse(acc) and is_sparse(value) and acc.dtype == value.dtype:
            return acc.minimum(value) if self.function == "MIN" else acc.maximum(value)
        acc, value = dense(acc), dense(value)
        return xp.minimum(acc, value) if self.function == "MIN" else xp.maximum(acc, value)

    def result(self, column_type, xp):
        if self.function == "COUNT":
            return self.count
        if self.function == "SUM_COUNTS" and self.value is None:
            return 0  # the final step of a two-phase COUNT over no tuples
        if self.value is None:
            return _empty(column_type, xp)
        value = S.divide(xp, self.value, self.count) if self.function == "AVG" else self.value
        # numpy gives 0-d sums as numpy scalars; a 0-d tile stays a 0-d array of its dtype, so that the
        # kernels after it treat it as a tensor (NEP 50: it keeps float32), not as a weak Python number; the
        # MIN or MAX of keys (numpy's minimum of two ints) is a Python int, as keys are
        if isinstance(value, np.generic):
            return xp.asarray(value) if isinstance(column_type, TensorType) else value.item()
        return value


def _sum(acc, value, xp):
    """acc + value, written into acc (the accumulator's own copy) where it is dense and of the sum's dtype."""
    if is_sparse(acc) and is_sparse(value):
        return settle((acc + value).tocsr())
    if is_sparse(acc):  # a dense value: the sum is dense; value is shared, so its copy takes the sum
        if getattr(value, "ndim", 0) and value.dtype == acc.dtype:
            return add_into(value.copy(), acc)
        return dense(acc) + value
    if getattr(acc, "ndim", 0) and acc.dtype == getattr(value, "dtype", None):
        if is_sparse(value):
            return add_into(acc, value)
        xp.add(acc, value, out=acc)
        return acc
    return acc + dense(value)


def _empty(column_type, xp):
    """An aggregate over no tuples: a zero tile (absent tiles are zeros), or NULL for keys."""
    if isinstance(column_type, TensorType):
        return xp.zeros(column_type.tile, dtype=column_type.dtype)
    return None
