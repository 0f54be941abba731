"""HashJoinExec: equi-join on keys (inner, left, full); the missing side's tiles are zero tiles (CSR for a CSR partner)."""
from __future__ import annotations

from typing import Callable, Optional

from trdb.execution.compile import compile_predicate
from trdb.execution.operators.operator import Batch, PhysicalOperator, batches, drain
from trdb.kernels.sparse import empty_csr, is_sparse
from trdb.planner.expressions import Bound
from trdb.planner.types import Schema, TensorType


class MissingSide:
    """Builds the tuple of a side that has no partner: NULL keys, zero tiles shaped like the partner's."""

    def __init__(self, schema: Schema, partner: Schema, backend):
        self.backend = backend
        self.makers: list[Callable[[tuple], object]] = []
        for column in schema:
            self.makers.append(self._maker(column, partner) if column.is_tensor else (lambda row: None))

    def _maker(self, column, partner: Schema) -> Callable[[tuple], object]:
        dtype, tile = column.type.dtype, column.type.tile
        zeros = self.backend.zeros
        # an edge tile's partner has the edge shape; the zero tile must have it too
        same_tiling = [i for i, c in enumerate(partner) if isinstance(c.type, TensorType) and c.type.tile == tile]
        if same_tiling:
            position = same_tiling[0]
            return lambda row: _zero_like(row[position], dtype, zeros)
        return lambda row: zeros(tile, dtype)

    def __call__(self, partner_row: tuple) -> tuple:
        return tuple(make(partner_row) for make in self.makers)


def _zero_like(partner, dtype, zeros):
    """A zero tile of the partner's shape: an empty CSR tile when the partner is CSR (nothing to allocate)."""
    if is_sparse(partner):
        return empty_csr(tuple(partner.shape), dtype, like=partner)
    return zeros(partner.shape, dtype)


class HashJoinExec(PhysicalOperator):
    """Builds a hash table on the right input, probes it with the left."""

    def __init__(self, left: PhysicalOperator, right: PhysicalOperator, kind: str,
                 left_keys: tuple[int, ...], right_keys: tuple[int, ...],
                 left_schema: Schema, right_schema: Schema, residual: Optional[Bound] = None):
        super().__init__()
        self.children = (left, right)
        self.kind = kind
        self.left_keys, self.right_keys = left_keys, right_keys
        self.left_schema, self.right_schema = left_schema, right_schema
        self.residual = residual

    def _open(self) -> None:
        self._table: dict[tuple, list[tuple]] = {}
        right_key = self._key_function(self.right_keys)
        for row in drain(self.children[1]):
            key = right_key(row)
            if None not in key:
                self._table.setdefault(key, []).append(row)
        self._matched: set[int] = set()
        self._residual = compile_predicate(self.residual, self.ctx.backend) if self.residual is not None else None
        self._missing_left = MissingSide(self.left_schema, self.right_schema, self.ctx.backend)
        self._missing_right = MissingSide(self.right_schema, self.left_schema, self.ctx.backend)
        self._left_key = self._key_function(self.left_keys)
        self._tail = None

    @staticmethod
    def _key_function(positions: tuple[int, ...]):
        return lambda row: tuple(row[p] for p in positions)

    def _next(self) -> Optional[Batch]:
        while self._tail is None:
            batch = self.children[0].next_batch()
            if batch is None:
                self._tail = batches(self._unmatched_right()) if self.kind == "FULL" else iter(())
                break
            out = self._probe(batch)
            if out:
                return out
        return next(self._tail, None)

    def _probe(self, batch: Batch) -> Batch:
        out = []
        for row in batch:
            partners = self._table.get(self._left_key(row), ())
            joined = [row + partner for partner in partners]
            if self._residual is not None:
                joined = [r for r in joined if self._residual(r)]
            if self.kind == "FULL":
                self._matched.update(id(p) for p in partners)
            if not joined and self.kind in ("LEFT", "FULL"):
                joined = [row + self._missing_right(row)]
            out.extend(joined)
        return out

    def _unmatched_right(self) -> list:
        return [self._missing_left(row) + row for rows in self._table.values() for row in rows
                if id(row) not in self._matched]

    def _close(self) -> None:
        self._table = {}
        self._matched = set()
