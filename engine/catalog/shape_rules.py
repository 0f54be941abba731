"""Static shape rules of the per-tile kernels, and the FLOP estimates that follow from the shapes.

A rule takes the function's label and its arguments (`Arg`s: shapes and constants, never data)
and returns the result shape (None for a Python scalar) or raises KernelSignatureError. The same
rule checks the actual tile shapes at run time, so static and run-time behaviour cannot drift.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import numpy

from trdb.catalog.kernel_args import Arg, describe_shapes, format_shape, signature_error
from trdb.storage.tensor_meta import DTYPE_ALIASES

Shape = Optional[tuple[int, ...]]
ShapeRule = Callable[[str, list[Arg]], Shape]
FlopRule = Callable[[list[Arg]], int]

CAST_DTYPES = {name: numpy.dtype(name) for name in
               ("bool", "float16", "float32", "float64", "int32", "int64")}
CAST_ALIASES = DTYPE_ALIASES  # one list of spellings for CAST and DTYPE


def broadcast(shapes: Sequence[tuple[int, ...]]) -> Optional[tuple[int, ...]]:
    """numpy's broadcast of `shapes`, or None where they do not broadcast."""
    first = shapes[0]
    if all(s == first for s in shapes):
        return tuple(first)
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for sizes in zip(*padded):
        distinct = {n for n in sizes if n != 1}
        if len(distinct) > 1:
            return None
        out.append(distinct.pop() if distinct else 1)
    return tuple(out)


def elementwise(label: str, args: list[Arg]) -> Shape:
    """Tensors broadcast against each other; scalars against everything; all scalars stay scalar."""
    shapes = [a.shape for a in args if a.shape is not None]
    if not shapes:
        return None
    out = broadcast(shapes)
    if out is None:
        raise signature_error(label, shapes, f"{describe_shapes(shapes)} do not broadcast")
    return out


def matmul(label: str, args: list[Arg]) -> Shape:
    """numpy matmul: 1-d operands are promoted to matrices and the promoted axis dropped again."""
    sa, sb = args[0].shape, args[1].shape
    shapes = [sa, sb]
    if not sa or not sb:
        raise signature_error(label, shapes, f"{describe_shapes(shapes)}: both operands must "
                              "have at least 1 dimension (use * to scale by a scalar)")
    a = (1,) + sa if len(sa) == 1 else sa
    b = sb + (1,) if len(sb) == 1 else sb
    if a[-1] != b[-2]:
        raise signature_error(label, shapes,
                              f"{describe_shapes(shapes)} do not align ({a[-1]} != {b[-2]})")
    batch = broadcast([a[:-2], b[:-2]])
    if batch is None:
        raise signature_error(label, shapes, f"{describe_shapes(shapes)}: batch dimensions "
                              f"{format_shape(a[:-2])} and {format_shape(b[:-2])} do not broadcast")
    out = batch + ((a[-2],) if len(sa) > 1 else ()) + ((b[-1],) if len(sb) > 1 else ())
    return out


def const_axis(label: str, tensor: Arg, axis_arg: Arg) -> int:
    """The axis constant normalized to 0..ndim-1, or a KernelSignatureError naming the shape."""
    axis, shape = axis_arg.const, tensor.shape
    ndim = 0 if shape is None else len(shape)
    if isinstance(axis, (bool, numpy.bool_)) or not isinstance(axis, (int, numpy.integer)):
        raise signature_error(label, [shape], f"axis must be an integer constant, got {axis!r} "
                              f"({describe_shapes([shape])})", hint="write the axis as an integer literal, such as -1")
    if not -ndim <= axis < ndim:
        raise signature_error(label, [shape], f"axis {axis} is out of range for "
                              f"{describe_shapes([shape])} ({ndim} dimensions)",
                              hint=f"an axis of this tile is 0 to {ndim - 1}, or -{ndim} to -1 from the end"
                              if ndim else "a 0-d tile has no axis: leave the axis out")
    return int(axis) % ndim


def transpose(label: str, args: list[Arg]) -> Shape:
    """No axes reverses them; otherwise the axes are a permutation (negative axes count back)."""
    shape = args[0].shape
    if len(args) == 1:
        return None if shape is None else shape[::-1]
    axes = [const_axis(label, args[0], a) for a in args[1:]]
    if sorted(axes) != list(range(len(shape))):
        given = tuple(a.const for a in args[1:])
        raise signature_error(label, [shape], f"axes {given} are not a permutation of the "
                              f"{len(shape)} axes of {describe_shapes([shape])}")
    return tuple(shape[i] for i in axes)


def along_axis(label: str, args: list[Arg]) -> Shape:
    """SOFTMAX: a tensor of at least one dimension keeps its shape; the axis must exist."""
    shape = args[0].shape
    if not shape:
        raise signature_error(label, [shape], f"needs a tensor of at least 1 dimension, "
                              f"got {describe_shapes([shape])}")
    if len(args) > 1:
        const_axis(label, args[0], args[1])
    return shape


def reduction(label: str, args: list[Arg]) -> Shape:
    """Without an axis everything is reduced to a 0-d tensor; with one, that axis disappears."""
    shape = args[0].shape
    if len(args) == 1:
        return ()
    axis = const_axis(label, args[0], args[1])
    return shape[:axis] + shape[axis + 1:]


def cross_entropy(label: str, args: list[Arg]) -> Shape:
    """CROSS_ENTROPY(logits, target [, axis]): a target of the logits' shape (one-hot rows or probabilities)
    or of the rows' shape (integer class labels); one value per row, the logits' shape without the axis."""
    logits, target = args[0].shape, args[1].shape
    shapes = [logits, target]
    if not logits:
        raise signature_error(label, shapes, f"the logits need at least 1 dimension, got {describe_shapes(shapes)}")
    axis = const_axis(label, args[0], args[2]) if len(args) > 2 else len(logits) - 1
    rows = logits[:axis] + logits[axis + 1:]
    if target == logits:
        return rows
    if target != rows:
        raise signature_error(label, shapes, f"the target must have the logits' shape {format_shape(logits)} (one-hot "
                              f"rows or probabilities) or the rows' shape {format_shape(rows)} (integer class "
                              f"labels), got {describe_shapes(shapes)}",
                              hint="the axis (default -1) is the one of the classes")
    if args[1].dtype is not None and numpy.dtype(args[1].dtype).kind not in "iu":
        raise signature_error(label, shapes, f"a target of the rows' shape {format_shape(rows)} holds class labels "
                              f"and must be an integer tensor, got {numpy.dtype(args[1].dtype).name}",
                              hint="CAST(target AS bigint), or pass one-hot rows of the logits' shape")
    return rows


def cross_entropy_dtype(args: list[Arg]) -> numpy.dtype:
    """CROSS_ENTROPY's result: the logits' and a probability target's dtypes promoted (class labels take no
    part), a float. Given, not probed: a probe's label 1 is out of range of its 1-element logits."""
    logits = numpy.dtype(args[0].dtype or "float32")
    if logits.kind not in "iuf":
        raise signature_error("CROSS_ENTROPY", [a.shape for a in args[:2]],
                              f"the logits must be numbers, got {logits.name}")
    labels = args[0].shape is not None and args[1].shape is not None and len(args[1].shape) < len(args[0].shape)
    dtype = logits if labels else numpy.result_type(logits, numpy.dtype(args[1].dtype or "float32"))
    return dtype if dtype.kind == "f" else numpy.dtype("float64")


def reshape(label: str, args: list[Arg]) -> Shape:
    """RESHAPE(a, (d0, d1, ...)) or RESHAPE(a, d0, d1, ...): the same number of elements, one -1 inferred."""
    shape = args[0].shape
    if shape is None:
        raise signature_error(label, [shape], "needs a tensor, got a scalar")
    given = args[1].const if len(args) == 2 and isinstance(args[1].const, tuple) else tuple(a.const for a in args[1:])
    for d in given:
        if isinstance(d, (bool, numpy.bool_)) or not isinstance(d, (int, numpy.integer)) or d < -1:
            raise signature_error(label, [shape], f"the new shape {_shape_text(given)} must be sizes >= 0 (one may "
                                  f"be -1), got {d!r} ({describe_shapes([shape])})",
                                  hint="write RESHAPE(v, (2, -1)) or RESHAPE(v, 2, -1)")
    elements, known = math.prod(shape), math.prod(d for d in given if d != -1)
    unknown = given.count(-1)
    fits = elements == known if not unknown else unknown == 1 and known > 0 and elements % known == 0
    if not fits:
        need = "at most one -1" if unknown > 1 else f"sizes whose product is {elements} (one of them may be -1)"
        raise signature_error(label, [shape], f"cannot reshape {describe_shapes([shape])} ({elements} elements) "
                              f"into {_shape_text(given)}", hint=f"the new shape needs {need}")
    return tuple(elements // known if d == -1 else int(d) for d in given)


def _shape_text(dims: tuple) -> str:
    return "(" + ", ".join(map(repr, dims)) + ("," if len(dims) == 1 else "") + ")"


def full_reduction(label: str, args: list[Arg]) -> Shape:
    """SUMSQ: one 0-d tensor whatever the input."""
    return ()


def cast_dtype(label: str, tensor_shape: Shape, name: object) -> numpy.dtype:
    """The dtype that CAST's constant names, or a KernelSignatureError saying what is allowed."""
    if isinstance(name, numpy.dtype) and name.name in CAST_DTYPES:
        return name
    key = str(name).strip().lower()
    key = CAST_ALIASES.get(key, key)
    if key in CAST_DTYPES:
        return CAST_DTYPES[key]
    shapes = [tensor_shape]
    if key == "bfloat16":
        raise signature_error(label, shapes, f"dtype bfloat16 is not supported on the CPU backend "
                              f"(numpy has no bfloat16) ({describe_shapes(shapes)})")
    raise signature_error(label, shapes, f"unknown dtype {name!r} ({describe_shapes(shapes)}); "
                          f"expected one of {', '.join(sorted(CAST_DTYPES))}")


def cast(label: str, args: list[Arg]) -> Shape:
    """CAST makes a tensor: a scalar becomes a 0-d tensor of the named dtype."""
    cast_dtype(label, args[0].shape, args[1].const)
    return () if args[0].shape is None else args[0].shape


# ---- FLOP estimates --------------------------------------------------------------------------

def size(shape: Shape) -> int:
    """Elements in a tensor of `shape`; a scalar counts as one."""
    return 1 if shape is None else math.prod(shape)


def elementwise_flops(per_element: int) -> FlopRule:
    """`per_element` operations for each element of the broadcast result."""
    def rule(args: list[Arg]) -> int:
        shapes = [a.shape for a in args if a.shape is not None]
        out = broadcast(shapes) if shapes else None
        elements = size(out) if out is not None or not shapes else max(map(size, shapes))
        return per_element * elements
    return rule


def input_flops(per_element: int) -> FlopRule:
    """`per_element` operations for each element of the first argument (reductions, copies)."""
    return lambda args: per_element * size(args[0].shape)


def matmul_flops(args: list[Arg]) -> int:
    """2*m*n*k per matrix product, times the broadcast batch size."""
    sa, sb = args[0].shape or (1,), args[1].shape or (1,)
    a = (1,) + sa if len(sa) == 1 else sa
    b = sb + (1,) if len(sb) == 1 else sb
    batch = broadcast([a[:-2], b[:-2]])
    if batch is None:  # an invalid call still gets an estimate; infer() reports the error
        batch = max(a[:-2], b[:-2], key=size)
    return 2 * size(batch) * a[-2] * a[-1] * b[-1]
