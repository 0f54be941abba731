"""Derivative rules of the per-tile kernels: reverse mode through one bound expression.

Each rule takes the call's arguments, the call itself (its value, for rules like SIGMOID's) and
the upstream gradient, and returns one gradient expression per argument (None: no gradient).
"""
from __future__ import annotations

from typing import Callable, Optional

from trdb.autodiff import internal_kernels as ik
from trdb.errors import NotSupportedError, ProgrammingError
from trdb.kernels import einsum_spec
from trdb.plan import expressions as bx
from trdb.planner.kernel_calls import call, is_tensor

Rule = Callable[[tuple, bx.Call, bx.Bound], list[Optional[bx.Bound]]]


def _fit(gradient: Optional[bx.Bound], arg: bx.Bound) -> Optional[bx.Bound]:
    """A gradient summed back to its argument's shape when the kernel broadcast that argument."""
    if gradient is None or not is_tensor(arg):
        return None
    if gradient.type.tile != arg.type.tile:
        return call(ik.UNBROADCAST, gradient, arg)
    return gradient


def _mask(condition: bx.Bound, like: bx.Bound) -> bx.Bound:
    return call("CAST", condition, like.type.dtype.name)


def _masked(upstream: bx.Bound, condition: bx.Bound, like: bx.Bound) -> bx.Bound:
    """`upstream` where `condition` holds, else zero. Of `like`'s dtype, the upstream is multiplied by the
    boolean condition itself (numpy takes it as 1 and 0 of that dtype: the same values, one pass less)."""
    if getattr(upstream.type, "dtype", None) == like.type.dtype:
        return call("*", upstream, condition)
    return call("*", upstream, _mask(condition, like))


def _swap_last(x: bx.Bound) -> bx.Bound:
    rank = len(x.type.tile)
    axes = list(range(rank))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return call("TRANSPOSE", x, *axes)


_BATCH_LETTERS = "abcdefghij"  # batch axes of a MATMUL operand in the EINSUMs of its derivative


def _matmul(args, out, u):
    a, b = args
    ra, rb = len(a.type.tile), len(b.type.tile)
    if ra == 1 and rb == 1:
        return [call("*", u, b), call("*", u, a)]
    if ra == 1:  # k @ (batch..., k, n) -> (batch..., n)
        batch = _BATCH_LETTERS[:rb - 2]
        return [call("EINSUM", f"{batch}kn,{batch}n->k", b, u), call("EINSUM", f"k,{batch}n->{batch}kn", a, u)]
    if rb == 1:  # (batch..., m, k) @ k -> (batch..., m)
        batch = _BATCH_LETTERS[:ra - 2]
        return [call("EINSUM", f"{batch}m,k->{batch}mk", u, b), call("EINSUM", f"{batch}mk,{batch}m->k", a, u)]
    return [_fit(call("MATMUL", u, _swap_last(b)), a), _fit(call("MATMUL", _swap_last(a), u), b)]


def _einsum(args, out, u):
    """Per operand, the upstream gradient contracted with the other operands into the operand's letters.

    The spec is first made plain for the tile shapes ('...' spelled out, a broadcast axis given a
    letter of its own), so a broadcast axis of size 1 receives the sum over the axis it met."""
    spec, operands = args[0].value, args[1:]
    shapes = [tuple(o.type.tile) if is_tensor(o) else () for o in operands]
    resolved = einsum_spec.resolve(spec, shapes)  # checked when the call was bound
    terms, output = resolved.inputs, resolved.output
    grads: list[Optional[bx.Bound]] = [None]
    for i, operand in enumerate(operands):
        if not is_tensor(operand):
            grads.append(None)
            continue
        if len(set(terms[i])) != len(terms[i]):
            raise NotSupportedError(f"GRAD: EINSUM '{spec}' repeats an index within an operand (a diagonal); "
                                    "its gradient is not supported yet")
        others = [t for j, t in enumerate(terms) if j != i]
        # ONES_LIKE(operand) carries the operand's own axes into the result, summed or not
        grad_spec = ",".join([output, *others, terms[i]]) + "->" + terms[i]
        rest = [o for j, o in enumerate(operands) if j != i]
        grads.append(call("EINSUM", grad_spec, u, *rest, call("ONES_LIKE", operand)))
    return grads


def _transpose(args, out, u):
    x, axes = args[0], [a.value for a in args[1:]]
    rank = len(x.type.tile)
    axes = axes or list(reversed(range(rank)))
    axes = [a + rank if a < 0 else a for a in axes]
    inverse = [axes.index(i) for i in range(rank)]
    return [call("TRANSPOSE", u, *inverse)] + [None] * len(axes)


def _power(args, out, u):
    a, p = args
    da = call("*", u, call("*", p, call("POWER", a, call("-", p, 1))))
    dp = call("*", u, call("*", out, call("LOG", a))) if is_tensor(p) else None
    return [_fit(da, a), _fit(dp, p)]


def _reduce_axis(args) -> Optional[int]:
    return args[1].value if len(args) > 1 else None


def _reduce_sum(args, out, u):
    a, axis = args[0], _reduce_axis(args)
    upstream = u if axis is None else call(ik.EXPAND_AXIS, u, axis)
    return [call(ik.BROADCAST_LIKE, upstream, a)] + [None] * (len(args) - 1)


def _reduce_mean(args, out, u):
    a = args[0]
    spread = _reduce_sum(args, out, u)[0]
    count = _reduce_sum(args, out, call("REDUCE_SUM", call("ONES_LIKE", a), *args[1:]))[0]
    return [call("/", spread, count)] + [None] * (len(args) - 1)


def _reduce_max(args, out, u):
    return [call(ik.MAX_BACKWARD, u, args[0], out, _reduce_axis(args))] + [None] * (len(args) - 1)


def _softmax(args, out, u):
    axis = args[1].value if len(args) > 1 else -1
    return [call(ik.SOFTMAX_BACKWARD, out, u, axis)] + [None] * (len(args) - 1)


def _log_softmax(args, out, u):
    axis = args[1].value if len(args) > 1 else -1
    return [call(ik.LOG_SOFTMAX_BACKWARD, out, u, axis)] + [None] * (len(args) - 1)


def _cross_entropy(args, out, u):
    """Fused and stable: softmax * sum(target) - target for the logits, -log_softmax for a float target."""
    logits, target = args[0], args[1]
    axis = args[2].value if len(args) > 2 else -1
    d_target = None
    if is_tensor(target) and target.type.dtype.kind == "f":
        d_target = call(ik.CROSS_ENTROPY_TARGET_BACKWARD, logits, u, axis)
    return [call(ik.CROSS_ENTROPY_BACKWARD, logits, target, u, axis), d_target] + [None] * (len(args) - 2)


def _argmax(args, out, u):
    raise ProgrammingError("GRAD: ARGMAX is not differentiable: its result is an integer index, constant "
                           "between ties, so no gradient flows through it",
                           hint="differentiate a loss of the scores themselves (CROSS_ENTROPY(logits, target), "
                                "SOFTMAX); compute ARGMAX in a view of its own, for accuracy")


def _reshape(args, out, u):
    return [call(ik.RESHAPE_LIKE, u, args[0])] + [None] * (len(args) - 1)


def _bce(args, out, u):
    x, y = args
    return [_fit(call("*", u, call("-", call("SIGMOID", x), y)), x), _fit(call("*", u, call("NEG", x)), y)]


def _binary(da, db) -> Rule:
    return lambda args, out, u: [_fit(da(*args, out, u), args[0]), _fit(db(*args, out, u), args[1])]


def _unary(d) -> Rule:
    return lambda args, out, u: [d(args[0], out, u)] + [None] * (len(args) - 1)


RULES: dict[str, Rule] = {
    "+": _binary(lambda a, b, o, u: u, lambda a, b, o, u: u),
    "-": _binary(lambda a, b, o, u: u, lambda a, b, o, u: call("NEG", u)),
    "*": _binary(lambda a, b, o, u: call("*", u, b), lambda a, b, o, u: call("*", u, a)),
    "/": _binary(lambda a, b, o, u: call("/", u, b),
                 lambda a, b, o, u: call("NEG", call("/", call("*", u, a), call("*", b, b)))),
    "NEG": _unary(lambda a, o, u: call("NEG", u)),
    "MATMUL": _matmul,
    "EINSUM": _einsum,
    "TRANSPOSE": _transpose,
    "RELU": _unary(lambda a, o, u: _masked(u, call(">", a, 0), a)),
    "SIGMOID": _unary(lambda a, o, u: call("*", call("*", u, o), call("-", 1, o))),
    "TANH": _unary(lambda a, o, u: call("*", u, call("-", 1, call("*", o, o)))),
    "EXP": _unary(lambda a, o, u: call("*", u, o)),
    "LOG": _unary(lambda a, o, u: call("/", u, a)),
    "SQRT": _unary(lambda a, o, u: call("/", u, call("*", o, 2))),
    "ABS": _unary(lambda a, o, u: call("*", u, call("-", _mask(call(">", a, 0), u), _mask(call("<", a, 0), u)))),
    "SQUARE": _unary(lambda a, o, u: call("*", u, call("*", a, 2))),
    "POWER": _power,
    "GREATEST": _binary(lambda a, b, o, u: call("*", u, _mask(call(">=", a, b), o)),
                        lambda a, b, o, u: call("*", u, _mask(call("<", a, b), o))),
    "LEAST": _binary(lambda a, b, o, u: call("*", u, _mask(call("<=", a, b), o)),
                     lambda a, b, o, u: call("*", u, _mask(call(">", a, b), o))),
    "SOFTMAX": _softmax,
    "REDUCE_SUM": _reduce_sum,
    "REDUCE_MEAN": _reduce_mean,
    "REDUCE_MAX": _reduce_max,
    "SUMSQ": _unary(lambda a, o, u: call("*", u, call("*", a, 2))),
    "CAST": _unary(lambda a, o, u: call("CAST", u, a.type.dtype.name) if o.type.dtype.kind == "f" else None),
    "ZEROS_LIKE": lambda args, out, u: [None],
    "ONES_LIKE": lambda args, out, u: [None],
    "BCE_WITH_LOGITS": _bce,
    "LOG_SOFTMAX": _log_softmax,
    "CROSS_ENTROPY": _cross_entropy,
    "ARGMAX": _argmax,
    "RESHAPE": _reshape,
}
NO_GRADIENT = {"=", "<>", "<", "<=", ">", ">="}  # piecewise constant: the gradient is zero (so is a CAST's
# to bool or an integer dtype, as in JAX; a CAST between float dtypes passes the gradient on)

# Kernels of one tensor argument whose derivative is a function of their output alone, as (output,
# upstream) -> gradient: a projection of such calls reads its own output in the backward pass (the
# forward's tiles, as an autograd tape keeps them) instead of its input, so nothing is computed again
# and the input need not be kept (RELU's mask is output > 0, which is input > 0).
OUTPUT_RULES: dict[str, Callable[[bx.Bound, bx.Bound], bx.Bound]] = {
    "RELU": lambda o, u: _masked(u, call(">", o, 0), o),
    "SIGMOID": lambda o, u: call("*", call("*", u, o), call("-", 1, o)),
    "TANH": lambda o, u: call("*", u, call("-", 1, call("*", o, o))),
    "EXP": lambda o, u: call("*", u, o),
    "SQRT": lambda o, u: call("/", u, call("*", o, 2)),
    "LOG_SOFTMAX": lambda o, u: call(ik.LOG_SOFTMAX_BACKWARD, o, u, -1),  # LOG_SOFTMAX(x): the last axis
}


def output_rule(expr: bx.Bound) -> Optional[tuple[int, Callable[[bx.Bound, bx.Bound], bx.Bound]]]:
    """(the input column, the rule) when `expr` is one of OUTPUT_RULES' kernels applied to a tensor column."""
    if isinstance(expr, bx.Call) and expr.function.name in OUTPUT_RULES and len(expr.args) == 1:
        (arg,) = expr.args
        if isinstance(arg, bx.ColumnIndex) and is_tensor(arg):
            return arg.index, OUTPUT_RULES[expr.function.name]
    return None


def depends_on(expr: bx.Bound, columns: set[int]) -> bool:
    return bool(bx.columns_used(expr) & columns)


def backpropagate(expr: bx.Bound, upstream: bx.Bound, columns: set[int], out: dict[int, bx.Bound]) -> None:
    """Add d(expr)/d(column) * upstream into out[column] for each tensor column in `columns`."""
    if not depends_on(expr, columns):
        return
    if isinstance(expr, bx.ColumnIndex):
        if is_tensor(expr):
            previous = out.get(expr.index)
            out[expr.index] = upstream if previous is None else call("+", previous, upstream)
        return
    if not isinstance(expr, bx.Call) or expr.function.name in NO_GRADIENT:
        return  # keys and predicates carry no gradient
    rule = RULES.get(expr.function.name)
    if rule is None:
        raise NotSupportedError(f"GRAD: {expr.function.label} is not differentiable",
                                hint="gradients flow through tensor kernels and +, -, *, /")
    for arg, gradient in zip(expr.args, rule(expr.args, expr, upstream)):
        if gradient is not None:
            backpropagate(arg, gradient, columns, out)


