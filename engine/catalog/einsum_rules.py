"""Static checks of a per-tile EINSUM: the spec's letters, operand ranks and dimension agreement."""
from __future__ import annotations

import functools

import opt_einsum

from trdb.catalog import einsum_spec
from trdb.catalog.kernel_args import Arg, describe_shapes, signature_error
from trdb.catalog.shape_rules import Shape, size


def parse_spec(label: str, spec: object, shapes: list) -> tuple[list[str], str]:
    """The spec's input terms and output term (numpy's implicit output when there is no '->')."""
    if not isinstance(spec, str):
        raise signature_error(label, shapes, f"the spec must be a string constant, got {spec!r} "
                              f"({describe_shapes(shapes)})")
    try:
        return einsum_spec.parse(spec)
    except einsum_spec.SpecError as e:
        raise signature_error(label, shapes, f"spec {spec!r}: {e} ({describe_shapes(shapes)})") from None


def einsum(label: str, args: list[Arg]) -> Shape:
    """The output shape; every letter must name dimensions of one size across all operands."""
    operands = args[1:]
    shapes = [a.shape for a in operands]
    spec = args[0].const
    inputs, output = parse_spec(label, spec, shapes)
    problem = einsum_spec.operand_count_problem(inputs, len(operands))
    if problem:
        raise signature_error(label, shapes, f"spec {spec!r} {problem} ({describe_shapes(shapes)})")
    sizes: dict[str, int] = {}
    for position, (term, shape) in enumerate(zip(inputs, shapes), start=1):
        rank = 0 if shape is None else len(shape)
        if len(term) != rank:
            raise signature_error(label, shapes, f"spec {spec!r}: operand {position} term "
                                  f"{term!r} has {len(term)} letters but the operand has "
                                  f"{rank} dimensions ({describe_shapes(shapes)})")
        for letter, n in zip(term, shape or ()):
            if sizes.setdefault(letter, n) != n:
                raise signature_error(label, shapes, f"spec {spec!r}: letter {letter!r} is "
                                      f"{sizes[letter]} in one place and {n} in another "
                                      f"({describe_shapes(shapes)})")
    problem = einsum_spec.output_problem(inputs, output)
    if problem:
        raise signature_error(label, shapes, f"spec {spec!r}: {problem} ({describe_shapes(shapes)})")
    return tuple(sizes[c] for c in output)


def einsum_flops(args: list[Arg]) -> int:
    """opt_einsum's operation count along its chosen contraction path."""
    spec = args[0].const
    shapes = tuple(() if a.shape is None else tuple(a.shape) for a in args[1:])
    if not isinstance(spec, str):
        return sum(size(s) for s in shapes)  # no spec to go by: at least every input is read
    return _path_cost(spec, shapes)


@functools.lru_cache(maxsize=1024)
def _path_cost(spec: str, shapes: tuple) -> int:
    _, info = opt_einsum.contract_path(spec, *shapes, shapes=True)
    return int(info.opt_cost)
