"""Static checks of a per-tile EINSUM: numpy's spec grammar fitted to the operand shapes, and its FLOPs."""
from __future__ import annotations

import functools

import opt_einsum

from trdb.catalog.kernel_args import Arg, describe_shapes, signature_error
from trdb.catalog.shape_rules import Shape, size
from trdb.kernels import einsum_spec


def resolve_spec(label: str, spec: object, shapes: list) -> einsum_spec.Resolved:
    """The spec fitted to the operand shapes (a scalar is 0-d), as numpy reads it; numpy's refusals as errors."""
    if not isinstance(spec, str):
        raise signature_error(label, shapes, f"the spec must be a string constant, got {spec!r} "
                              f"({describe_shapes(shapes)})")
    try:
        return einsum_spec.resolve(spec, [() if s is None else s for s in shapes])
    except einsum_spec.SpecError as e:
        raise signature_error(label, shapes, f"spec {spec!r}: {e} ({describe_shapes(shapes)})") from None


def einsum(label: str, args: list[Arg]) -> Shape:
    """The output shape: numpy.einsum's, with its ellipsis and size-1 broadcasting."""
    operands = args[1:]
    resolved = resolve_spec(label, args[0].const, [a.shape for a in operands])
    size = resolved.size
    return tuple(size[c] for c in resolved.output)


def einsum_flops(args: list[Arg]) -> int:
    """opt_einsum's operation count along its chosen contraction path."""
    spec = args[0].const
    shapes = tuple(() if a.shape is None else tuple(a.shape) for a in args[1:])
    if not isinstance(spec, str):
        return sum(size(s) for s in shapes)  # no spec to go by: at least every input is read
    try:
        plain = einsum_spec.resolve(spec, shapes).spec
    except einsum_spec.SpecError:
        return sum(size(s) for s in shapes)  # the shape rule reports it
    return _path_cost(plain, shapes)


@functools.lru_cache(maxsize=1024)
def _path_cost(spec: str, shapes: tuple) -> int:
    _, info = opt_einsum.contract_path(spec, *shapes, shapes=True)
    return int(info.opt_cost)
