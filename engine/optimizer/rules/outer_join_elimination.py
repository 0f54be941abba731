"""outer_join_elimination: an outer join whose extra tuples only feed products becomes an inner join.

A LEFT join adds, for each unmatched left tuple, a tuple whose right tiles are zeros; a FULL join
also adds unmatched right tuples with zero left tiles. When everything above turns such a tuple
into a tuple of zero tiles only (`X.v * Y.v`, `MATMUL`, `EINSUM`, `RELU(X.v * Y.v) * 2`, ...), the
added tuples are absent tuples of the result (an absent tuple is an all-zero tile), and the inner
join gives the same tensor without computing them.

The rule walks the plan from the root down, carrying for each node a test `droppable(cols)`: may
the node's tuples whose tensor columns `cols` are all zero tiles be dropped (or added) without
changing the statement's result? At the root the answer is yes when `cols` covers every tensor
column of the result (and there is one), unless the caller keeps zero tuples apart from absent
ones (`RuleContext.keep_zero_tuples`: UPDATE, MINIMIZE, shared subplans). Filters and sorts pass
the test on (they look at one tuple at a time); a projection passes on "the expressions that
vanish when these input columns are zero"; a SUM aggregate with GROUP BY passes on "every summed
argument vanishes"; a join passes each side its columns; UNION ALL passes it to every part.
LIMIT, RETILE, COUNT, AVG, MIN, MAX and SUM without GROUP BY count or see the tuples: below them
nothing is dropped.

At a LEFT join, when the right side's tensor columns may be dropped, the join becomes INNER. At a
FULL join: both sides' -> INNER; the left side's only -> LEFT (the unmatched right tuples go);
the right side's only -> the sides are swapped into a LEFT join under a projection that restores
the column order. "Vanishes" assumes finite tiles (0 * inf is taken as 0), as the data model's
"a product with an absent tile is absent" does.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.types import KeyType

Droppable = Callable[[frozenset], bool]

# f(0) = 0 for these, given their first argument vanishes (the others are constant axes or dtypes)
_FIRST_ARGUMENT = frozenset({"NEG", "RELU", "TANH", "SQRT", "ABS", "SQUARE", "TRANSPOSE", "SUMSQ",
                             "REDUCE_SUM", "REDUCE_MAX", "REDUCE_MEAN", "CAST"})
_ANY_ARGUMENT = frozenset({"*", "MATMUL"})        # a product vanishes with any factor
_EVERY_ARGUMENT = frozenset({"+", "-", "GREATEST", "LEAST"})


def outer_join_elimination(plan: lp.Plan, context) -> lp.Plan:
    """Every LEFT or FULL join whose added tuples would only hold zero tiles in the result, made inner."""
    if getattr(context, "keep_zero_tuples", False):
        return plan
    return _rewrite(plan, _root_test(plan))


def _never(columns: frozenset) -> bool:
    return False


def _is_tensor(column_type) -> bool:
    return hasattr(column_type, "tile")


def _root_test(plan: lp.Plan) -> Droppable:
    """At the root a tuple may go when all its tensor columns are zero (keys alone are not a tensor)."""
    types = [c.type for c in plan.schema]
    if any(not (_is_tensor(t) or isinstance(t, KeyType)) for t in types):
        return _never  # a scalar or ordinary column: the rows are plain rows
    tensors = frozenset(i for i, t in enumerate(types) if _is_tensor(t))
    if not tensors:
        return _never
    return lambda columns: tensors <= columns


def _rewrite(plan: lp.Plan, droppable: Droppable) -> lp.Plan:
    if isinstance(plan, (lp.Filter, lp.Sort)):
        return lp.with_inputs(plan, [_rewrite(plan.input, droppable)])
    if isinstance(plan, lp.Project):
        return lp.with_inputs(plan, [_rewrite(plan.input, _through_project(plan, droppable))])
    if isinstance(plan, lp.Aggregate):
        return lp.with_inputs(plan, [_rewrite(plan.input, _through_aggregate(plan, droppable))])
    if isinstance(plan, lp.UnionAll):
        return lp.with_inputs(plan, [_rewrite(part, droppable) for part in plan.parts])
    if isinstance(plan, lp.Join):
        return _rewrite_join(plan, droppable)
    # Limit counts tuples; Retile re-cuts tiles; leaves have no inputs
    return lp.with_inputs(plan, [_rewrite(child, _never) for child in plan.inputs])


def _through_project(plan: lp.Project, droppable: Droppable) -> Droppable:
    def test(columns: frozenset) -> bool:
        zero = frozenset(o for o, e in enumerate(plan.exprs) if _is_tensor(e.type) and vanishes(e, columns))
        return droppable(zero)
    return test


def _through_aggregate(plan: lp.Aggregate, droppable: Droppable) -> Droppable:
    # SUM skips a zero tile; a group of zero tiles only sums to zero (droppable above). Other
    # aggregates count or compare the tuples, and without GROUP BY the one result tuple always exists.
    if not plan.group_by or not plan.calls or any(c.function != "SUM" or c.arg is None for c in plan.calls):
        return _never
    groups = len(plan.group_by)
    sums = frozenset(range(groups, groups + len(plan.calls)))

    def test(columns: frozenset) -> bool:
        return all(vanishes(c.arg, columns) for c in plan.calls) and droppable(sums)
    return test


def _rewrite_join(plan: lp.Join, droppable: Droppable) -> lp.Plan:
    width = len(plan.left.schema)
    # a tuple of one side that is zero on `columns` gives joined tuples zero on them (and, when it
    # goes, at most unmatched partners whose own side is all zeros): each side inherits the test
    left = _rewrite(plan.left, droppable)
    right = _rewrite(plan.right, lambda columns: droppable(frozenset(c + width for c in columns)))
    rewritten = lp.with_inputs(plan, [left, right])
    if plan.kind not in ("LEFT", "FULL"):
        return rewritten
    left_tensors = frozenset(i for i, c in enumerate(plan.schema) if i < width and _is_tensor(c.type))
    right_tensors = frozenset(i for i, c in enumerate(plan.schema) if i >= width and _is_tensor(c.type))
    drop_unmatched_left = bool(right_tensors) and droppable(right_tensors)   # tuples with zero right tiles
    drop_unmatched_right = bool(left_tensors) and droppable(left_tensors)
    if plan.kind == "LEFT":
        return dataclasses.replace(rewritten, kind="INNER") if drop_unmatched_left else rewritten
    if drop_unmatched_left and drop_unmatched_right:
        return dataclasses.replace(rewritten, kind="INNER")
    if drop_unmatched_right:
        return dataclasses.replace(rewritten, kind="LEFT")
    if drop_unmatched_left:
        return _swapped_left_join(rewritten)
    return rewritten


def _swapped_left_join(plan: lp.Join) -> lp.Plan:
    """FULL join that may lose its unmatched left tuples: right LEFT JOIN left, columns put back in order."""
    left_width, right_width = len(plan.left.schema), len(plan.right.schema)
    join = lp.Join(plan.right, plan.left, "LEFT", plan.right_keys, plan.left_keys,
                   plan.right.schema + plan.left.schema, plan.residual)
    exprs = tuple(bx.ColumnIndex(right_width + p if p < left_width else p - left_width, column.type)
                  for p, column in enumerate(plan.schema))
    return lp.Project(join, exprs, plan.schema)


def vanishes(expr: bx.Bound, zero: frozenset) -> bool:
    """Whether `expr` is certainly an all-zero tile when the input columns in `zero` are zero tiles.

    Conservative: anything not known to map zero to zero (EXP, SIGMOID, `+ 1`, LOG, SOFTMAX, a
    division, key arithmetic, ...) does not vanish.
    """
    if isinstance(expr, bx.ColumnIndex):
        return expr.index in zero
    if isinstance(expr, bx.Const):
        return _is_zero_constant(expr.value)
    if not isinstance(expr, bx.Call):
        return False
    name, args = expr.function.name, expr.args
    if name in _ANY_ARGUMENT:
        return any(vanishes(a, zero) for a in args)
    if name == "EINSUM":
        return any(vanishes(a, zero) for a in args[1:])  # args[0] is the spec
    if name in _EVERY_ARGUMENT:
        return all(vanishes(a, zero) for a in args)
    if name in _FIRST_ARGUMENT:
        return bool(args) and vanishes(args[0], zero)
    if name == "/":  # 0 / y is 0 only for a y known not to be 0
        return vanishes(args[0], zero) and isinstance(args[1], bx.Const) and _is_nonzero_scalar(args[1].value)
    if name == "POWER":  # 0 ** p is 0 for a positive constant p
        return vanishes(args[0], zero) and isinstance(args[1], bx.Const) and _is_positive_scalar(args[1].value)
    if name == "ZEROS_LIKE":
        return True
    return False


def _is_zero_constant(value) -> bool:
    if isinstance(value, (str, bytes)) or value is None:
        return False
    try:
        array = np.asarray(value)
        return array.dtype.kind in "biuf" and bool(np.all(array == 0))
    except Exception:  # anything unusual is not known to be zero
        return False


def _is_nonzero_scalar(value) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool) and np.isfinite(value) \
        and value != 0


def _is_positive_scalar(value) -> bool:
    return _is_nonzero_scalar(value) and value > 0
