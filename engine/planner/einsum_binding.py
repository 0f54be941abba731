"""EINSUM in FROM bound: the spec checked against the operands, and the result's columns (a logical `Einsum`)."""
from __future__ import annotations

import math
from typing import Sequence

from trdb.kernels import einsum_spec
from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.types import KEY, Column, TensorType
from trdb.planner.kernel_calls import call
from trdb.planner.retile import tensor_columns


def bind_einsum(binder, item) -> lp.Einsum:
    """EINSUM('spec', X, ...): its operands bound, its spec fitted to their shapes; decomposed later."""
    _check_spec_text(binder.ctx, item)
    bound = [_bind_operand(binder, node, n) for n, node in enumerate(item.operands, start=1)]
    plans, details = tuple(p for p, _ in bound), tuple(d for _, d in bound)
    try:
        resolved = einsum_spec.resolve(item.spec, [d.shape for d in details])
    except einsum_spec.SpecError as e:
        raise binder.ctx.fail(item, f"EINSUM spec {item.spec!r}: {e}") from None
    schema = result_schema(details, resolved, item.alias or "einsum")
    span = item.span
    position = lp.SourcePosition(binder.ctx.text, span.line if span else None, span.column if span else None)
    return lp.Einsum(plans, details, resolved, schema, position)


def _check_spec_text(ctx, item) -> None:
    """The spec's text checked before its operands are bound (numpy's grammar; shapes come later)."""
    try:
        inputs, _ = einsum_spec.parse_text(item.spec)
    except einsum_spec.SpecError as e:
        raise ctx.fail(item, f"EINSUM spec {item.spec!r}: {e}") from None
    problem = einsum_spec.operand_count_problem(inputs, len(item.operands))
    if problem:
        raise ctx.fail(item, f"EINSUM spec {item.spec!r} {problem}")


def _bind_operand(binder, node, position: int) -> tuple[lp.Plan, lp.EinsumOperand]:
    plan = binder.bind_from_item(node)
    keys, value = tensor_columns(plan)
    if value is None:
        raise binder.ctx.fail(node, f"EINSUM operand {position} must be a tensor relation: key columns, "
                                    f"then one tensor column")
    column = plan.schema[value].type
    rank = len(column.tile)
    if len(keys) > rank:
        raise binder.ctx.fail(node, f"EINSUM operand {position} has {len(keys)} keys but {rank}-d tiles")
    shape = tuple(e if e is not None else (t if axis >= len(keys) else None)
                  for axis, (t, e) in enumerate(zip(column.tile, column.extent)))
    if None in shape:
        raise binder.ctx.fail(node, f"EINSUM operand {position}: its logical shape is not known; "
                                    f"store it as a tensor first")
    for axis in range(len(keys), rank):  # an axis no key indexes lies whole in every tile
        if column.tile[axis] < shape[axis]:
            raise binder.ctx.fail(node, f"EINSUM operand {position}: its tiles {tuple(column.tile)} hold "
                                        f"{column.tile[axis]} of the {shape[axis]} elements along axis {axis + 1}, "
                                        f"which none of its {len(keys)} key columns indexes",
                                  hint="select the key column of every tiled axis (a tile per key), or RETILE "
                                       "the operand so that the axis lies whole in each tile")
    # an empty axis (size 0) is cut in tiles of 1, none of them present
    tile = tuple(max(1, min(t, n) if axis < len(keys) else n) for axis, (t, n) in enumerate(zip(column.tile, shape)))
    return plan, lp.EinsumOperand(tuple(keys), tile, shape, column.dtype)


def largest_operand_tiles(terms: Sequence[str], operands: Sequence) -> dict:
    """Per letter, the tile of the largest operand that has it (operands: with `shape` and `tile`), so the
    most data keeps its tiling."""
    tiles: dict[str, int] = {}
    for i in sorted(range(len(operands)), key=lambda i: -math.prod(operands[i].shape)):
        for letter, t in zip(terms[i], operands[i].tile):
            tiles.setdefault(letter, t)
    return tiles


def result_schema(details, resolved: einsum_spec.Resolved, alias: str) -> tuple[Column, ...]:
    """A key per output letter, then `v`: the einsum's dtype, tiled like the largest operand."""
    values = [bx.ColumnIndex(0, TensorType(d.dtype, d.shape, d.shape)) for d in details]
    dtype = call("EINSUM", resolved.spec, *values).type.dtype
    tiles, size = largest_operand_tiles(resolved.inputs, details), resolved.size
    value = TensorType(dtype, tuple(tiles[c] for c in resolved.output), tuple(size[c] for c in resolved.output))
    return tuple(Column(c, KEY, alias) for c in resolved.output) + (Column("v", value, alias),)
