"""Kernels that only gradient plans use: undoing broadcasts, reductions and reshapes; softmax, log-softmax,
cross-entropy and max backward."""
from __future__ import annotations

import numpy

from trdb.catalog.functions import KernelFunction
from trdb.catalog.kernel_args import Arg, signature_error
from trdb.catalog.shape_rules import input_flops
from trdb.kernels import functions as K
from trdb.kernels.axis_reductions import axis_sum


def _shape_of(position: int):
    def rule(label: str, args: list[Arg]):
        shape = args[position].shape
        return () if shape is None else shape
    return rule


def _normal_axis(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


def _expand_rule(label: str, args: list[Arg]):
    shape = args[0].shape or ()
    axis = _normal_axis(args[1].const, len(shape) + 1)
    if not 0 <= axis <= len(shape):
        raise signature_error(label, [shape], f"axis {args[1].const} is out of range")
    return shape[:axis] + (1,) + shape[axis:]


def unbroadcast(xp, g, like):
    """Sum `g` down to the shape of `like` (the reverse of numpy broadcasting)."""
    shape = xp.asarray(like).shape
    g = xp.asarray(g)
    extra = g.ndim - len(shape)
    if extra > 0:
        g = g.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return xp.broadcast_to(g, shape) if g.shape != tuple(shape) else g


def broadcast_like(xp, u, like):
    """`u` (a reduction's result with kept axes, or 0-d) broadcast back to the shape of `like`."""
    return xp.broadcast_to(xp.asarray(u), like.shape).copy()


def expand_axis(xp, u, axis):
    return xp.expand_dims(xp.asarray(u), axis)


def softmax_backward(xp, s, u, axis):
    return s * (u - axis_sum(xp, u * s, axis, keepdims=True))


def log_softmax_backward(xp, out, u, axis):
    """u - softmax * sum(u) along the axis; the softmax is exp of the output, computed once."""
    return u - xp.exp(out) * axis_sum(xp, u, axis, keepdims=True)


def cross_entropy_backward(xp, logits, target, u, axis):
    """d/d logits: (softmax * sum(target) - target) times the row's upstream gradient spread along the axis;
    class labels are one-hot rows (their sum is 1)."""
    s = K.softmax(xp, logits, axis)
    if target.ndim < s.ndim:
        return (s - K.one_hot_like(xp, target, s, axis)) * xp.expand_dims(xp.asarray(u), axis)
    return (s * axis_sum(xp, target, axis, keepdims=True) - target) * xp.expand_dims(xp.asarray(u), axis)


def cross_entropy_target_backward(xp, logits, u, axis):
    """d/d target: -log_softmax(logits) times the row's upstream gradient spread along the axis."""
    return -K.log_softmax(xp, logits, axis) * xp.expand_dims(xp.asarray(u), axis)


def _cross_entropy_backward_dtype(args: list[Arg]):
    """softmax(logits) (a float) promoted with a probability target and the upstream gradient; given, not
    probed: a probe's class label 1 is out of range of its 1-element logits."""
    logits, target, u = (numpy.dtype(a.dtype or "float32") for a in args[:3])
    parts = [logits if logits.kind == "f" else numpy.dtype("float64"), u]
    if args[1].shape is not None and args[0].shape is not None and len(args[1].shape) == len(args[0].shape):
        parts.append(target)
    return numpy.result_type(*parts)


def reshape_like(xp, u, like):
    """`u` in the shape of `like` (RESHAPE's gradient: the input's own shape, an edge tile's too)."""
    return xp.reshape(xp.asarray(u), like.shape)


def max_backward(xp, u, a, out, axis):
    """The upstream gradient shared among the elements equal to the maximum (ties split evenly)."""
    keep = xp.asarray(out) if axis is None else xp.expand_dims(xp.asarray(out), axis)
    mask = (a == keep).astype(a.dtype)
    ties = axis_sum(xp, mask, axis, keepdims=axis is not None)
    grad = xp.asarray(u) if axis is None else xp.expand_dims(xp.asarray(u), axis)
    return mask * (grad / ties)


def _max_rule(label: str, args: list[Arg]):
    return args[1].shape


UNBROADCAST = KernelFunction("UNBROADCAST", unbroadcast, 2, 2, _shape_of(1), input_flops(1))
BROADCAST_LIKE = KernelFunction("BROADCAST_LIKE", broadcast_like, 2, 2, _shape_of(1), input_flops(1))
EXPAND_AXIS = KernelFunction("EXPAND_AXIS", expand_axis, 2, 2, _expand_rule, input_flops(0), const_positions={1})
SOFTMAX_BACKWARD = KernelFunction("SOFTMAX_BACKWARD", softmax_backward, 3, 3, _shape_of(0), input_flops(4),
                                  const_positions={2})
MAX_BACKWARD = KernelFunction("MAX_BACKWARD", max_backward, 4, 4, _max_rule, input_flops(4), const_positions={3})
LOG_SOFTMAX_BACKWARD = KernelFunction("LOG_SOFTMAX_BACKWARD", log_softmax_backward, 3, 3, _shape_of(0),
                                      input_flops(4), const_positions={2})
CROSS_ENTROPY_BACKWARD = KernelFunction("CROSS_ENTROPY_BACKWARD", cross_entropy_backward, 4, 4, _shape_of(0),
                                        input_flops(9), const_positions={3},
                                        dtype_rule=_cross_entropy_backward_dtype)
CROSS_ENTROPY_TARGET_BACKWARD = KernelFunction("CROSS_ENTROPY_TARGET_BACKWARD", cross_entropy_target_backward,
                                               3, 3, _shape_of(0), input_flops(7), const_positions={2})
RESHAPE_LIKE = KernelFunction("RESHAPE_LIKE", reshape_like, 2, 2, _shape_of(1), input_flops(1))
