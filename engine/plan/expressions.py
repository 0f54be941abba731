"""Bound per-tuple expressions: column positions, constants, kernel calls, key arithmetic, predicates."""
from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Union

import numpy as np

from trdb.catalog.functions import KernelFunction
from trdb.plan.types import KEY, ColumnType, ScalarType, TensorType


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
    """Integer arithmetic on keys: + - * // %; NULL propagates. KEY_OPS gives each its Python function; `//` and
    `%` are SQL's (PostgreSQL's integer `/` and `%`, DuckDB's `//` and `%`): the quotient rounds toward zero and
    the remainder takes the dividend's sign (-7 // 2 is -3, -7 % 2 is -1), as a query without tensors, which
    DuckDB runs, computes them."""

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


def truncated_quotient(a: int, b: int) -> int:
    """a // b rounded toward zero, as SQL divides integers (ZeroDivisionError where b is 0)."""
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def truncated_remainder(a: int, b: int) -> int:
    """What is left of a after `truncated_quotient(a, b)` times b: the sign of a, as SQL's %."""
    return a - b * truncated_quotient(a, b)


# The one table of each: execution computes with them per tuple, constant folding at plan time.
KEY_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": truncated_quotient,
           "%": truncated_remainder}
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


def in_set_truth(value: Any, values: frozenset, negated: bool) -> Optional[bool]:
    """`value [NOT] IN values` in SQL's three-valued logic: unknown (None) for a NULL value, and where no
    item equals it but one is NULL (`x NOT IN (3, NULL)` is never true)."""
    if value is None:
        return None
    if value in values:
        return not negated
    return None if None in values else negated


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


def subexpressions(expr: Bound) -> Iterator[Bound]:
    """`expr` and every expression inside it."""
    stack = [expr]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(children(current))


def tile_columns(expr: Bound) -> list[ColumnIndex]:
    """The tile columns an expression reads, each once."""
    found: dict[int, ColumnIndex] = {}
    for node in subexpressions(expr):
        if isinstance(node, ColumnIndex) and isinstance(node.type, TensorType):
            found.setdefault(node.index, node)
    return list(found.values())


def columns_used(expr: Bound) -> set[int]:
    """Input positions an expression reads."""
    if isinstance(expr, ColumnIndex):
        return {expr.index}
    used: set[int] = set()
    for child in children(expr):
        used |= columns_used(child)
    return used


def elementwise_columns(expr: Bound) -> Optional[frozenset[int]]:
    """The tensor columns an expression computes from, if it is elementwise kernels (CAST among them) over
    tensor columns and constants that are no arrays, and has a tensor type; else None. Such an expression
    gives each element of its result from the same element of its inputs, in any grouping of tiles."""
    if not isinstance(expr.type, TensorType) or not isinstance(expr, Call):
        return None
    columns: set[int] = set()

    def walk(node: Bound) -> bool:
        if isinstance(node, ColumnIndex):
            columns.add(node.index)
            return isinstance(node.type, TensorType)
        if isinstance(node, Const):
            return not isinstance(node.value, np.ndarray)
        if isinstance(node, Call):
            elementwise = node.function.elementwise or node.function.name == "CAST"
            return elementwise and all(walk(arg) for arg in node.args)
        return False
    return frozenset(columns) if walk(expr) and columns else None


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


def map_expr(expr: Bound, rewrite: Callable[[Bound], Bound]) -> Bound:
    """Apply `rewrite` to every node of an expression, children first; identity kept when nothing changes."""
    if isinstance(expr, (Call, Logical, Coalesce)):
        args = tuple(map_expr(a, rewrite) for a in expr.args)
        if any(n is not o for n, o in zip(args, expr.args)):
            expr = dataclasses.replace(expr, args=args)
    elif isinstance(expr, (KeyArith, Compare)):
        left, right = map_expr(expr.left, rewrite), map_expr(expr.right, rewrite)
        if left is not expr.left or right is not expr.right:
            expr = dataclasses.replace(expr, left=left, right=right)
    elif isinstance(expr, (Not, InSet, IsNullTest)):
        arg = map_expr(expr.arg, rewrite)
        if arg is not expr.arg:
            expr = dataclasses.replace(expr, arg=arg)
    return rewrite(expr)


def substitute(expr: Bound, exprs: tuple) -> Bound:
    """`expr` with every column reference replaced by the expression that computes it."""
    return map_expr(expr, lambda e: exprs[e.index] if isinstance(e, ColumnIndex) else e)
