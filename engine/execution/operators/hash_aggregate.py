"""HashAggregateExec: groups by key expressions; SUM, AVG, MIN, MAX elementwise over tiles (dense or CSR); COUNT(*)."""
from __future__ import annotations

import numpy as np

from trdb.errors import DataError
from trdb.execution.compile import compile_expr
from trdb.execution.operators.inplace import FRESH
from trdb.execution.operators.operator import BlockingOperator, PhysicalOperator, drain
from trdb.execution.operators.product_sum import product_sum_feed
from trdb.kernels import sparse_functions as S
from trdb.kernels.sparse import add_into, dense, is_sparse, settle
from trdb.planner import expressions as bx
from trdb.planner.logical import AggregateCall
from trdb.planner.types import Schema, TensorType


class Accumulator:
    """The running state of one aggregate call in one group."""

    __slots__ = ("function", "value", "count")

    def __init__(self, function: str):
        self.function = function
        self.value = None
        self.count = 0

    def add(self, value, xp, owned: bool = False) -> None:
        """Fold in one tile; `owned`: it is a fresh kernel result that no one else holds (not copied)."""
        self.count += 1
        if self.function == "COUNT" or value is None:
            return
        if self.value is None:
            copy = not owned and hasattr(value, "copy") and getattr(value, "ndim", 0)
            self.value = value.copy() if copy else value
            return
        try:
            self.value = self._combine(self.value, value, xp)
        except ValueError:
            raise DataError(f"{self.function}: tiles of one group have shapes "
                            f"{np.shape(self.value)} and {np.shape(value)}") from None

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
        if self.function == "AVG":
            return S.divide(xp, self.value, self.count)
        return self.value


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


class HashAggregateExec(BlockingOperator):
    def __init__(self, child: PhysicalOperator, group_by: tuple, calls: tuple[AggregateCall, ...], schema: Schema,
                 partial: bool = False):
        super().__init__()
        self.partial = partial  # a partial aggregate over no tuples emits nothing: the final step decides
        self.children = (child,)
        self.group_by = group_by
        self.calls = calls
        self.schema = schema

    def _compute(self) -> list:
        backend = self.ctx.backend
        xp = backend.xp
        keys = [compile_expr(g, backend) for g in self.group_by]
        feeds = [self._feed(c, backend) for c in self.calls]
        groups: dict[tuple, list[Accumulator]] = {}
        for row in drain(self.children[0]):
            key = tuple(k(row) for k in keys)
            accumulators = groups.get(key)
            if accumulators is None:
                accumulators = groups[key] = [Accumulator(c.function) for c in self.calls]
            for accumulator, feed in zip(accumulators, feeds):
                feed(accumulator, row)
        if not groups and not self.group_by and not self.partial:
            groups[()] = [Accumulator(c.function) for c in self.calls]
        types = [c.type for c in self.schema[len(self.group_by):]]
        return [key + tuple(a.result(t, xp) for a, t in zip(accs, types)) for key, accs in groups.items()]

    @staticmethod
    def _feed(call: AggregateCall, backend):
        """How one row reaches the call's accumulator: SUM(MATMUL) of CSR tiles adds in place, else add()."""
        fused = product_sum_feed(call.function, call.arg, backend)
        if fused is not None:
            return fused
        if call.arg is None:
            return lambda accumulator, row: accumulator.add(None, backend.xp)
        arg, xp = compile_expr(call.arg, backend), backend.xp
        owned = isinstance(call.arg, bx.Call) and call.arg.function.name in FRESH
        return lambda accumulator, row: accumulator.add(arg(row), xp, owned)
