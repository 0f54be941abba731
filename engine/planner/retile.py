"""Binding RETILE(X, (t, ...)) and retiling tensor operands: a Retile node with one key per tile axis."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from trdb.catalog.names import fold
from trdb.plan import logical as lp
from trdb.plan.types import KEY, Column, TensorType

DEFAULT_KEYS = "ijklmn"


def tensor_columns(plan: lp.Plan) -> tuple[list[int], Optional[int]]:
    """Key positions and the position of the one tensor column (None unless exactly one, after the keys)."""
    keys = [i for i, c in enumerate(plan.schema) if c.is_key]
    tensors = [i for i, c in enumerate(plan.schema) if c.is_tensor]
    if len(tensors) != 1 or len(keys) + 1 != len(plan.schema):
        return keys, None
    return keys, tensors[0]


def key_names(existing: list[str], rank: int) -> list[str]:
    """The existing key names, then default names (i, j, k, ... then k6, k7, ...) not already used."""
    names = list(existing[:rank])
    candidates = list(DEFAULT_KEYS) + [f"k{n}" for n in range(6, 6 + rank + len(DEFAULT_KEYS))]
    for candidate in candidates:
        if len(names) >= rank:
            break
        if fold(candidate) not in {fold(n) for n in names}:
            names.append(candidate)
    return names


def retile(plan: lp.Plan, tile: tuple[int, ...], alias: Optional[str] = None) -> lp.Retile:
    """`plan` (keys, then one tensor column) re-cut to tiles of shape `tile`."""
    keys, value = tensor_columns(plan)
    source: TensorType = plan.schema[value].type
    tile = tuple(min(t, e) if e else t for t, e in zip(tile, source.extent))
    names = key_names([plan.schema[k].name for k in keys], len(tile))
    schema = tuple(Column(n, KEY, alias) for n in names)
    schema += (Column(plan.schema[value].name, replace(source, tile=tile), alias),)
    return lp.Retile(plan, tile, schema)


def bind_retile(binder, item) -> lp.Plan:
    """RETILE(operand, (t, ...)): the operand's tensor cut into tiles of the given shape."""
    plan = binder.bind_from_item(item.operand)
    keys, value = tensor_columns(plan)
    if value is None:
        raise binder.ctx.fail(item, "RETILE needs a tensor relation: key columns, then one tensor column")
    source: TensorType = plan.schema[value].type
    if len(keys) > len(source.tile):
        raise binder.ctx.fail(item, f"RETILE: the operand has {len(keys)} keys but {len(source.tile)}-d tiles")
    if len(item.tile) != len(source.tile):
        raise binder.ctx.fail(item, f"RETILE: the tile {tuple(item.tile)} has rank {len(item.tile)} but the "
                                    f"operand's tiles have rank {len(source.tile)} {tuple(source.tile)}")
    if any(not isinstance(t, int) or t <= 0 for t in item.tile):
        raise binder.ctx.fail(item, f"RETILE: tile sizes must be positive integers, got {tuple(item.tile)}")
    return retile(plan, tuple(item.tile), item.alias or "retile")
