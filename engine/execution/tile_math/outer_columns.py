"""The missing side of a LEFT or FULL join over column batches: its NULL columns as masks, its zero tiles stacked.

A tuple that meets no partner is handed on with the other side's tuple that operators/hash_join.py's
MissingSide makes: NULL for every column that is not a tensor, and for a tensor a zero tile shaped as the
partner's tile of the same tiling (an edge tile's partner is an edge tile), else of the nominal tile, in
the column's dtype. Over column batches the same tuples are columns: a masked array (masked where
NULL) for each column that is not a tensor, the zero tiles written into the gathered stack. Where the
zeros would not stack with the partner side's tiles of the batch (another shape or dtype), or a
batch's columns are not what the schema says (a tensor column not stacked), the batch goes tuple by tuple.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from trdb.plan.types import Schema, TensorType

Fill = list  # per column: None (NULL) or the zero tile of a missing tuple


class MissingColumns:
    """One side's columns where it has no partner, as MissingSide gives them tuple by tuple."""

    def __init__(self, schema: Schema, partner: Schema):
        self.tensor = [c.is_tensor for c in schema]
        self.dtypes = [np.dtype(c.type.dtype) if c.is_tensor else None for c in schema]
        self.nominal = [tuple(c.type.tile) if c.is_tensor else None for c in schema]
        self.partner_tensor = [c.is_tensor for c in partner]
        self.same = [next((p for p, other in enumerate(partner) if isinstance(other.type, TensorType)
                           and other.type.tile == c.type.tile), None) if c.is_tensor else None for c in schema]

    def matches(self, is_tile: Sequence[bool], partner: bool = False) -> bool:
        """Whether a batch's tile columns are this side's tensors (or, `partner`, the other side's)."""
        return tuple(is_tile) == tuple(self.partner_tensor if partner else self.tensor)

    def fill(self, partner_columns: Sequence[np.ndarray], like: Optional[Sequence[np.ndarray]] = None
             ) -> Optional[Fill]:
        """Each column's value in a missing tuple beside the partner's columns: None (NULL) or a zero tile; None
        where a zero tile would not stack with this side's columns `like` (another shape or dtype)."""
        out: Fill = []
        for c, tensor in enumerate(self.tensor):
            if not tensor:
                out.append(None)
                continue
            position = self.same[c]
            shape = tuple(partner_columns[position].shape[1:]) if position is not None else self.nominal[c]
            if like is not None and (like[c].shape[1:] != shape or like[c].dtype != self.dtypes[c]):
                return None
            out.append(np.zeros(shape, self.dtypes[c]))
        return out


def missing_columns(rows: int, fill: Fill) -> list[np.ndarray]:
    """The columns of `rows` missing tuples: NULL (masked) int64 columns, stacks of the zero tiles."""
    return [np.ma.MaskedArray(np.zeros(rows, np.int64), np.ones(rows, bool)) if zero is None
            else np.zeros((rows, *zero.shape), zero.dtype) for zero in fill]


def take_or_missing(column: np.ndarray, rows: np.ndarray, zero: Optional[np.ndarray]) -> np.ndarray:
    """`column` at `rows`, where a row of -1 is a missing tuple's value: NULL (masked) where `zero` is None,
    else the zero tile (which has the column's tile shape and dtype)."""
    absent = rows < 0
    if not absent.any():
        return column[rows]
    if not len(column):
        return missing_columns(len(rows), [zero])[0]
    taken = column[np.where(absent, 0, rows)]
    if zero is None:
        return np.ma.MaskedArray(np.ma.getdata(taken), absent | np.ma.getmaskarray(taken))
    taken[absent] = 0
    return taken
