"""Output column names: the alias, else the referenced column's name, else `v` for tensors (made unique)."""
from __future__ import annotations

from typing import Optional, Sequence

from trdb.catalog.names import fold
from trdb.plan import expressions as bx
from trdb.plan.types import TensorType


def _first_column_name(expr: bx.Bound, names_in: Sequence[str]) -> Optional[str]:
    if isinstance(expr, bx.ColumnIndex):
        return names_in[expr.index] if expr.index < len(names_in) else None
    for child in bx.children(expr):
        name = _first_column_name(child, names_in)
        if name:
            return name
    return None


def output_names(exprs: Sequence[bx.Bound], aliases: Sequence[Optional[str]],
                 referenced: Sequence[Optional[str]], input_names: Sequence[str] = ()) -> list[str]:
    """One name per output column, unique (case-insensitively), preferring what the user wrote."""
    names: list[str] = []
    taken: set[str] = set()
    for expr, alias, ref in zip(exprs, aliases, referenced):
        if alias:
            base = alias
        elif ref:
            base = ref
        elif isinstance(expr.type, TensorType):
            base = "v"
        else:
            base = _first_column_name(expr, input_names) or "k"
        name, suffix = base, 1
        while fold(name) in taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        taken.add(fold(name))
        names.append(name)
    return names
