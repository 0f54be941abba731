"""Bound per-tuple expressions: column positions, constants, kernel calls, key arithmetic, predicates."""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Optional, Union

from trdb.catalog.functions import KernelFunction
from trdb.planner.types import KEY, ColumnType, ScalarType


@dataclass(frozen=True)
class ColumnIndex:
    """The value at `index` of the input tuple."""

    index: int
    type: ColumnType


@dataclass(frozen=True)
class Const:
    value: Any
    type: ColumnType


@dataclass(frozen=True)
class Call:
    """A kernel function or elementwise operator applied to tiles and scalars."""

    function: KernelFunction
    args: tuple["Bound", ...]
    type: ColumnType


@dataclass(frozen=True)
class KeyArith:
    """Integer arithmetic on keys: + - * // %; NULL propagates. KEY_OPS gives each its Python function."""

    op: str
    left: "Bound"
    right: "Bound"
    type: ColumnType = KEY


@dataclass(frozen=True)
class Compare:
    """= <> < <= > >= on keys and scalars; NULL compares as false. COMPARE_OPS gives each its function."""

    op: str
    left: "Bound"
    right: "Bound"
    type: ColumnType = ScalarType(bool)


# The one table of each: execution computes with them per tuple, constant folding at plan time.
KEY_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
           "%": operator.mod}
COMPARE_OPS = {"=": operator.eq, "<>": operator.ne, "<": operator.lt, "<=": operator.le,
               ">": operator.gt, ">=": operator.ge}


@dataclass(frozen=True)
class Logical:
    """AND / OR over predicates."""

    op: str
    args: tuple["Bound", ...]
    type: ColumnType = ScalarType(bool)


@dataclass(frozen=True)
class Not:
    arg: "Bound"
    type: ColumnType = ScalarType(bool)


@dataclass(frozen=True)
class InSet:
    arg: "Bound"
    values: frozenset
    negated: bool = False
    type: ColumnType = ScalarType(bool)


@dataclass(frozen=True)
class IsNullTest:
    arg: "Bound"
    negated: bool = False
    type: ColumnType = ScalarType(bool)


@dataclass(frozen=True)
class Coalesce:
    args: tuple["Bound", ...]
    type: ColumnType = KEY


Bound = Union[ColumnIndex, Const, Call, KeyArith, Compare, Logical, Not, InSet, IsNullTest, Coalesce]


def children(expr: Bound) -> tuple[Bound, ...]:
    if isinstance(expr, (Call, Logical, Coalesce)):
        return expr.args
    if isinstance(expr, (KeyArith, Compare)):
        return (expr.left, expr.right)
    if isinstance(expr, (Not, InSet, IsNullTest)):
        return (expr.arg,)
    return ()


def columns_used(expr: Bound) -> set[int]:
    """Input positions an expression reads."""
    if isinstance(expr, ColumnIndex):
        return {expr.index}
    used: set[int] = set()
    for child in children(expr):
        used |= columns_used(child)
    return used


def conjuncts(expr: Bound) -> list[Bound]:
    if isinstance(expr, Logical) and expr.op == "AND":
        return [c for arg in expr.args for c in conjuncts(arg)]
    return [expr]


def conjunction(conditions: list[Bound]) -> Optional[Bound]:
    """The conditions ANDed together: None for none, the condition itself for one (conjuncts' inverse)."""
    if not conditions:
        return None
    return conditions[0] if len(conditions) == 1 else Logical("AND", tuple(conditions))


def shift_columns(expr: Bound, offset: int) -> Bound:
    """The same expression reading every column `offset` positions further right."""
    return remap_columns(expr, {i: i + offset for i in columns_used(expr)})


def remap_columns(expr: Bound, mapping: dict[int, int]) -> Bound:
    if isinstance(expr, ColumnIndex):
        return ColumnIndex(mapping[expr.index], expr.type)
    if isinstance(expr, (Call, Logical, Coalesce)):
        return type(expr)(**{**expr.__dict__, "args": tuple(remap_columns(a, mapping) for a in expr.args)})
    if isinstance(expr, (KeyArith, Compare)):
        return type(expr)(**{**expr.__dict__, "left": remap_columns(expr.left, mapping),
                             "right": remap_columns(expr.right, mapping)})
    if isinstance(expr, (Not, InSet, IsNullTest)):
        return type(expr)(**{**expr.__dict__, "arg": remap_columns(expr.arg, mapping)})
    return expr
