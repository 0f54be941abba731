"""Blockwise evaluation of elementwise kernel chains: each block's temporaries stay in the CPU cache.

`SIGMOID(A.v * 2 + 1)` on a 1024 x 1024 tile makes about ten passes over 4 MB of memory; run on
blocks of rows, the same passes touch 256 KB at a time, so the chain is bound by arithmetic
rather than memory bandwidth, and workers on different cores stop competing for it.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from trdb.planner import expressions as bx
from trdb.planner.types import TensorType

BLOCK_BYTES = 256 << 10
ELEMENTWISE = {"+", "-", "*", "/", "NEG", "RELU", "SIGMOID", "TANH", "EXP", "LOG", "SQRT", "ABS", "SQUARE",
               "POWER", "GREATEST", "LEAST", "BCE_WITH_LOGITS", "=", "<>", "<", "<=", ">", ">="}


def _calls(expr: bx.Bound) -> Optional[int]:
    """How many elementwise calls the tree holds, or None if anything else is in it."""
    if isinstance(expr, bx.Call):
        if expr.function.name not in ELEMENTWISE:
            return None
        counts = [_calls(a) for a in expr.args]
        return None if None in counts else 1 + sum(counts)
    if isinstance(expr, bx.ColumnIndex):
        return 0
    if isinstance(expr, bx.Const) and not isinstance(expr.type, TensorType):
        return 0
    return None


def blockwise(expr: bx.Bound, compiled: Callable[[tuple], Any]) -> Optional[Callable[[tuple], Any]]:
    """A blockwise version of a compiled elementwise chain over same-shape tiles, or None."""
    if not isinstance(expr, bx.Call) or (_calls(expr) or 0) < 2:
        return None
    tensors = sorted(i for i in bx.columns_used(expr) if isinstance(_column_type(expr, i), TensorType))
    if not tensors:
        return None

    def run(row: tuple) -> Any:
        first = row[tensors[0]]
        shape = getattr(first, "shape", ())
        if len(shape) == 0 or any(getattr(row[i], "shape", None) != shape for i in tensors) \
                or first.nbytes <= BLOCK_BYTES or not isinstance(first, np.ndarray):
            return compiled(row)
        step = max(1, BLOCK_BYTES // max(1, first.nbytes // shape[0]))
        values = list(row)
        out = None
        for start in range(0, shape[0], step):
            for i in tensors:
                values[i] = row[i][start:start + step]
            block = compiled(tuple(values))
            if out is None:
                out = np.empty(shape, dtype=block.dtype)
            out[start:start + step] = block
        return out
    return run


def _column_type(expr: bx.Bound, index: int):
    if isinstance(expr, bx.ColumnIndex):
        return expr.type if expr.index == index else None
    for child in bx.children(expr):
        found = _column_type(child, index)
        if found is not None:
            return found
    return None
