"""constant_folding: kernel calls, key arithmetic and predicates over constants computed once at plan time;
products by a unit of their own type dropped."""
from __future__ import annotations

import dataclasses

import numpy as np

from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.optimizer.plan_rewrite import transform_up
from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.expressions import map_expr
from trdb.plan.types import TensorType

_UNFOLDED = object()  # the expression cannot (or must not) be computed now; leave it to run time


def constant_folding(plan: lp.Plan, context) -> lp.Plan:
    """Fold constant sub-expressions everywhere; drop filters and residuals that are always true."""
    return transform_up(plan, _fold_node)


def _fold_node(plan: lp.Plan) -> lp.Plan:
    if isinstance(plan, lp.Filter):
        predicate = fold(plan.predicate)
        if predicate is not plan.predicate:  # in a predicate, AND of one condition is the condition
            predicate = bx.conjunction(bx.conjuncts(predicate))
        if _is_true(predicate):
            return plan.input
        return plan if predicate is plan.predicate else lp.Filter(plan.input, predicate)
    if isinstance(plan, lp.Project):
        exprs = tuple(fold(e) for e in plan.exprs)
        return plan if _same(exprs, plan.exprs) else dataclasses.replace(plan, exprs=exprs)
    if isinstance(plan, lp.Join) and plan.residual is not None:
        residual = fold(plan.residual)
        if residual is plan.residual:
            return plan
        residual = bx.conjunction(bx.conjuncts(residual))
        return dataclasses.replace(plan, residual=None if _is_true(residual) else residual)
    if isinstance(plan, lp.Aggregate):
        groups = tuple(fold(e) for e in plan.group_by)
        calls = tuple(c if c.arg is None else dataclasses.replace(c, arg=fold(c.arg)) for c in plan.calls)
        if _same(groups, plan.group_by) and all(n.arg is o.arg for n, o in zip(calls, plan.calls)):
            return plan
        return dataclasses.replace(plan, group_by=groups, calls=calls)
    return plan


def _same(new: tuple, old: tuple) -> bool:
    return all(n is o for n, o in zip(new, old))


def _is_true(expr: bx.Bound) -> bool:
    return isinstance(expr, bx.Const) and expr.value is True


def fold(expr: bx.Bound) -> bx.Bound:
    return map_expr(expr, _fold_one)


def _fold_one(expr: bx.Bound) -> bx.Bound:
    if isinstance(expr, bx.Logical):
        return _fold_logical(expr)
    if isinstance(expr, bx.Coalesce):
        return _fold_coalesce(expr)
    if isinstance(expr, (bx.Const, bx.ColumnIndex)):
        return expr
    if not all(isinstance(c, bx.Const) for c in bx.children(expr)):
        return _without_unit_factor(expr)
    value = _value(expr)
    # the folded constant keeps the expression's type, so no column changes kind or dtype
    return expr if value is _UNFOLDED else bx.Const(value, expr.type)


def _without_unit_factor(expr: bx.Bound) -> bx.Bound:
    """`x * 1` is x where the product has x's own type (a gradient's constant seed, 1, multiplies each
    derivative: autodiff/gradient.py)."""
    if isinstance(expr, bx.Call) and expr.function.name == "*" and len(expr.args) == 2:
        for unit, other in (expr.args, expr.args[::-1]):
            if isinstance(unit, bx.Const) and _is_one(unit.value) and other.type == expr.type:
                return other
    return expr


def _is_one(value) -> bool:
    return not isinstance(value, (bool, np.bool_, str)) and np.ndim(value) == 0 and \
        np.asarray(value).dtype.kind in "iuf" and value == 1


def _value(expr: bx.Bound):
    if isinstance(expr, bx.Call):
        return _call_value(expr)
    if any(isinstance(c.value, np.ndarray) for c in bx.children(expr)):
        return _UNFOLDED
    if isinstance(expr, bx.Not):  # NOT of NULL (unknown) is unknown, as at run time
        value = expr.arg.value
        return None if value is None else not value if isinstance(value, bool) else _UNFOLDED
    if isinstance(expr, bx.IsNullTest):
        return (expr.arg.value is None) != expr.negated
    if isinstance(expr, bx.InSet):
        return bx.in_set_truth(expr.arg.value, expr.values, expr.negated)
    a, b = expr.left.value, expr.right.value
    if a is None or b is None:
        return None
    if isinstance(expr, bx.Compare):
        return bool(bx.COMPARE_OPS[expr.op](a, b))
    if isinstance(expr, bx.KeyArith) and not (expr.op in ("//", "%") and b == 0):
        value = bx.KEY_OPS[expr.op](a, b)  # division by zero stays a run-time error
        return value if -(2 ** 63) <= value < 2 ** 63 else _UNFOLDED  # and so does leaving BIGINT
    return _UNFOLDED


def _call_value(expr: bx.Call):
    """A kernel over constant tiles, computed now when its result has exactly the inferred type."""
    if not isinstance(expr.type, TensorType):
        return _UNFOLDED
    try:
        with NUMPY_BACKEND.errstate():
            value = np.asarray(expr.function.call(NUMPY_BACKEND, [a.value for a in expr.args]))
    except Exception:  # noqa: BLE001 - a failing kernel fails at run time, as it would unfolded
        return _UNFOLDED
    if value.dtype != expr.type.dtype or value.shape != tuple(expr.type.tile):
        return _UNFOLDED
    value.setflags(write=False)
    return value


def _fold_logical(expr: bx.Logical) -> bx.Bound:
    absorbing, neutral = (False, True) if expr.op == "AND" else (True, False)
    kept = []
    for arg in expr.args:
        if isinstance(arg, bx.Const) and arg.value is neutral:
            continue
        if isinstance(arg, bx.Const) and arg.value is absorbing:  # a NULL stays: x AND NULL is FALSE or unknown
            return bx.Const(absorbing, expr.type)
        kept.append(arg)
    if not kept:
        return bx.Const(neutral, expr.type)
    return expr if len(kept) == len(expr.args) else dataclasses.replace(expr, args=tuple(kept))


def _fold_coalesce(expr: bx.Coalesce) -> bx.Bound:
    args = list(expr.args)
    while len(args) > 1 and isinstance(args[0], bx.Const) and args[0].value is None:
        args.pop(0)
    if isinstance(args[0], bx.Const):
        return bx.Const(args[0].value, expr.type)
    return expr if len(args) == len(expr.args) else dataclasses.replace(expr, args=tuple(args))
