"""Binds AST expressions against a schema: resolves names, infers tile shapes and dtypes, checks kernels."""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from trdb.catalog.functions import (
    NOT_CONST,
    OPERATORS,
    Arg,
    KernelFunction,
    KernelSignatureError,
    function_names,
    is_aggregate,
    lookup_function,
)
from trdb.catalog.names import did_you_mean, fold
from trdb.errors import DataError, Error, ProgrammingError
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.kernels.sparse_input import checked_sparse
from trdb.parser import ast
from trdb.plan import expressions as bx
from trdb.plan.types import KeyType, OtherType, ScalarType, Schema, TensorType

ARITHMETIC = ("+", "-", "*", "/", "//", "%")
# numpy dtype kinds a parameter array may not have in an expression: what each holds
NOT_NUMBERS = {"U": "text", "S": "bytes", "O": "Python objects", "M": "datetimes", "m": "time spans",
               "V": "records"}
COMPARISONS = ("=", "<>", "<", "<=", ">", ">=")


class BindContext:
    """What every binder of one statement shares: its text (for carets) and its parameters."""

    def __init__(self, text: str, params: Sequence[Any], value_limit: Optional[int] = None):
        self.text = text
        self.params = list(params)
        self.value_limit = value_limit  # bytes a parameter used as a value in an expression may hold
        self.used_params: set[int] = set()

    def fail(self, node: Any, message: str, hint: Optional[str] = None, error=ProgrammingError) -> Error:
        span = getattr(node, "span", None)
        exc = error(message, hint=hint)
        return exc.at(self.text, span.line if span else None, span.column if span else None)

    def param(self, node: ast.Param) -> Any:
        if node.index >= len(self.params):
            raise self.fail(node, f"parameter {node.index + 1} is used but only {len(self.params)} "
                                  f"parameter(s) were given")
        self.used_params.add(node.index)
        return self.params[node.index]


def constant(value: Any) -> bx.Const:
    """A literal or bound parameter as a constant expression."""
    if isinstance(value, np.ndarray):
        return bx.Const(value, TensorType(value.dtype, value.shape, value.shape))
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, int) and not isinstance(value, bool) and not -(2 ** 63) <= value < 2 ** 63:
        raise DataError(f"integer {value} is out of range for BIGINT (-2**63 .. 2**63-1)",
                        hint="write it as a float (for example 1e20) where a tensor value is meant")
    return bx.Const(value, ScalarType(type(value)))


def _kind_of(value: Any) -> str:
    """A value as an error message names it (a list, a numpy array of float64, ...)."""
    if isinstance(value, np.ndarray):
        return f"a numpy array of {value.dtype}"
    name = type(value).__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def to_arg(expr: bx.Bound, as_extent: bool = False) -> Arg:
    """How the kernel registry sees a bound argument (shape None: a weak Python scalar)."""
    value = expr.value if isinstance(expr, bx.Const) and not isinstance(expr.type, TensorType) else NOT_CONST
    if isinstance(expr.type, TensorType):
        shape = expr.type.extent if as_extent else expr.type.tile
        return Arg(shape=tuple(shape), dtype=expr.type.dtype, const=value)
    return Arg(shape=None, dtype=None, const=value)


class ExpressionBinder:
    """Binds expressions over one input schema."""

    def __init__(self, ctx: BindContext, schema: Schema):
        self.ctx = ctx
        self.schema = schema
        self._by_name: Optional[dict[str, list[int]]] = None

    # ------------------------------------------------------------ names

    def resolve(self, ref: ast.ColumnRef) -> int:
        if self._by_name is None:  # one pass over the schema per binder, not one per reference
            self._by_name = {}
            for i, c in enumerate(self.schema):
                self._by_name.setdefault(fold(c.name), []).append(i)
        matches = [i for i in self._by_name.get(fold(ref.name), ())
                   if ref.qualifier is None or (self.schema[i].qualifier and
                                                fold(self.schema[i].qualifier) == fold(ref.qualifier))]
        if len(matches) == 1:
            return matches[0]
        label = f"{ref.qualifier}.{ref.name}" if ref.qualifier else ref.name
        if matches:
            raise self.ctx.fail(ref, f'column reference "{label}" is ambiguous',
                                hint="qualify it with its table alias")
        known = [f"{c.qualifier}.{c.name}" if ref.qualifier and c.qualifier else c.name for c in self.schema]
        raise self.ctx.fail(ref, f'column "{label}" does not exist', hint=did_you_mean(label, known))

    # ------------------------------------------------------------ dispatch

    def bind(self, node: ast.Expr) -> bx.Bound:
        method = getattr(self, f"_bind_{type(node).__name__}", None)
        if method is None:
            raise self.ctx.fail(node, f"{type(node).__name__} is not allowed here")
        return method(node)

    def _bind_Literal(self, node: ast.Literal) -> bx.Bound:
        return constant(node.value)

    def _bind_Param(self, node: ast.Param) -> bx.Bound:
        value = self.ctx.param(node)
        size = getattr(value, "nbytes", 0)
        if self.ctx.value_limit is not None and isinstance(size, int) and size > self.ctx.value_limit:
            raise self.ctx.fail(node, f"parameter {node.index + 1} holds {size:,} bytes ({getattr(value, 'shape', '')}), "
                                      f"more than memory_limit ({self.ctx.value_limit:,} bytes) allows a value in an "
                                      "expression", hint="store it as a tensor (CREATE TENSOR ... FROM ?) and join it",
                                error=DataError)
        if hasattr(value, "tocsr") and not isinstance(value, np.ndarray):
            # a scipy.sparse value of any format is a CSR tile, as tiles are (its arrays checked before scipy reads them)
            value = checked_sparse(value, f"the scipy.sparse matrix of parameter {node.index + 1}").tocsr()
        if isinstance(value, np.ndarray) and value.dtype.kind in NOT_NUMBERS:
            raise self.ctx.fail(node, f"parameter {node.index + 1} is an array of {value.dtype} "
                                      f"({NOT_NUMBERS[value.dtype.kind]}), which a tensor expression cannot use",
                                hint="pass an array of numbers or booleans (float32, float64, int32, int64, bool)")
        return constant(value)

    def _bind_ColumnRef(self, node: ast.ColumnRef) -> bx.Bound:
        index = self.resolve(node)
        column_type = self.schema[index].type
        if isinstance(column_type, OtherType):
            raise self.ctx.fail(node, f'column "{node.name}" has type {column_type}, which tensor queries '
                                      f"cannot use", hint="use integer or floating point columns")
        return bx.ColumnIndex(index, column_type)

    def _bind_Star(self, node: ast.Star) -> bx.Bound:
        raise self.ctx.fail(node, "* is only allowed in a select list")

    def _bind_UnaryOp(self, node: ast.UnaryOp) -> bx.Bound:
        operand = self.bind(node.operand)
        if node.op == "NOT":
            return bx.Not(operand)
        if node.op == "+":
            return operand
        if isinstance(operand.type, TensorType):
            return self.call(node, OPERATORS["NEG"], [operand])
        if isinstance(operand, bx.Const):
            if operand.value is None:
                return operand  # -NULL is NULL
            self.check_number(node.operand, operand, "unary -")
            return constant(-operand.value)
        return bx.KeyArith("-", bx.Const(0, ScalarType(int)), operand)

    def check_number(self, node: ast.Expr, bound: bx.Bound, what: str) -> None:
        """Refuse a constant, parameter or column that is not a number (or NULL) where keys or numbers are meant."""
        if not isinstance(bound.type, ScalarType) or bound.type.python_type in (int, float, bool, type(None)):
            return
        kind = bound.type.python_type.__name__
        if not isinstance(bound, bx.Const):  # a column of a subquery that selected such a constant
            raise self.ctx.fail(node, f"{what} takes numbers; this column holds {kind} values",
                                hint="aggregate and compute with number or tensor columns")
        name = f"parameter {node.index + 1}" if isinstance(node, ast.Param) else "the constant"
        shown = repr(bound.value)
        raise self.ctx.fail(node, f"{what} takes numbers; {name} is a {kind} "
                                  f"({shown[:40] + '...' if len(shown) > 40 else shown})",
                            hint="pass an int or a float (a numpy array for a tensor value)")

    def _bind_BinaryOp(self, node: ast.BinaryOp) -> bx.Bound:
        if node.op in ("AND", "OR"):
            return bx.Logical(node.op, (self.bind(node.left), self.bind(node.right)))
        left, right = self.bind(node.left), self.bind(node.right)
        if node.op in COMPARISONS:
            return self.compared(node, node.op, (node.left, left), (node.right, right))
        if isinstance(left.type, TensorType) or isinstance(right.type, TensorType):
            return self.call(node, OPERATORS[node.op], [left, right], (node.left, node.right))
        return self.scalar_arith(node, left, right)

    def compared(self, node: ast.Expr, op: str, left: tuple, right: tuple) -> bx.Bound:
        """A comparison, (ast node, bound) on each side: of tensors, a kernel giving a tile of truth values (WHERE
        takes one a tuple); else of keys and numbers (`compare`)."""
        (left_node, left_bound), (right_node, right_bound) = left, right
        if isinstance(left_bound.type, TensorType) or isinstance(right_bound.type, TensorType):
            return self.call(node, OPERATORS[op], [left_bound, right_bound], (left_node, right_node))
        return self.compare(op, left, right)

    def compare(self, op: str, left: tuple, right: tuple) -> bx.Bound:
        """A comparison of keys and numbers: (ast node, bound) on each side; two like constants may compare."""
        (left_node, left_bound), (right_node, right_bound) = left, right
        if not (isinstance(left_bound, bx.Const) and isinstance(right_bound, bx.Const) and
                left_bound.type == right_bound.type):
            self.check_number(left_node, left_bound, op)
            self.check_number(right_node, right_bound, op)
        return bx.Compare(op, left_bound, right_bound)

    def scalar_arith(self, node: ast.BinaryOp, left: bx.Bound, right: bx.Bound) -> bx.Bound:
        if isinstance(left, bx.Const) and isinstance(right, bx.Const):
            if node.op in bx.KEY_OPS and all(type(c.value) is int for c in (left, right)):
                if right.value == 0 and node.op in ("//", "%"):
                    raise self.ctx.fail(node, f"division by zero ({left.value} {node.op} 0)")
                return constant(bx.KEY_OPS[node.op](left.value, right.value))  # SQL's // and % (-1 // 2 is 0)
            try:
                return constant(OPERATORS[node.op].call(NUMPY_BACKEND, [left.value, right.value]))
            except Exception as exc:  # a constant expression that cannot be evaluated
                raise self.ctx.fail(node, f"cannot evaluate {left.value!r} {node.op} {right.value!r}: {exc}")
        for side in (left, right):
            if isinstance(side.type, ScalarType) and side.type.python_type not in (int, type(None)):
                raise self.ctx.fail(node, f"key arithmetic needs integers, got {side.type}",
                                    hint="keys are BIGINT; use tensor columns for real-valued math")
        if node.op == "/":
            raise self.ctx.fail(node, "keys are integers: use // for integer division of keys")
        return bx.KeyArith(node.op, left, right)

    def _bind_Between(self, node: ast.Between) -> bx.Bound:
        operand = (node.operand, self.bind(node.operand))
        test = bx.Logical("AND", (self.compared(node, ">=", operand, (node.low, self.bind(node.low))),
                                  self.compared(node, "<=", operand, (node.high, self.bind(node.high)))))
        return bx.Not(test) if node.negated else test

    def _bind_InList(self, node: ast.InList) -> bx.Bound:
        items = [self.bind(item) for item in node.items]
        if not all(isinstance(item, bx.Const) for item in items):
            raise self.ctx.fail(node, "IN needs a list of constants")
        for source, item in zip(node.items, items):  # a parameter can bind a list or an array where one value goes
            if not isinstance(item.value, (int, float, str, bool, type(None))):
                raise self.ctx.fail(source, f"IN takes one value per item, not {_kind_of(item.value)}",
                                    hint="write IN (?, ?, ...) with one parameter per value")
        operand = self.bind(node.operand)
        if isinstance(operand.type, TensorType):  # a tensor's value (`SUMSQ(v) IN (1, 4)`): one equality an item
            for source, item in zip(node.items, items):
                if item.value is None:
                    raise self.ctx.fail(source, "IN on a tensor's value takes numbers: a tensor is never NULL, so NULL "
                                                "never equals it", hint="leave NULL out of the list")
            equal = [self.compared(node, "=", (node.operand, operand), (source, item))
                     for source, item in zip(node.items, items)]
            test = equal[0] if len(equal) == 1 else bx.Logical("OR", tuple(equal))
            return bx.Not(test) if node.negated else test
        return bx.InSet(operand, frozenset(i.value for i in items), node.negated)

    def _bind_IsNull(self, node: ast.IsNull) -> bx.Bound:
        return bx.IsNullTest(self.bind(node.operand), node.negated)

    def _bind_Cast(self, node: ast.Cast) -> bx.Bound:
        operand = self.bind(node.operand)
        if not isinstance(operand.type, TensorType) and node.type_name in ("bigint", "integer", "int"):
            return operand
        return self.call(node, lookup_function("CAST"), [operand, bx.Const(node.type_name, ScalarType(str))])

    def _bind_FuncCall(self, node: ast.FuncCall) -> bx.Bound:
        if is_aggregate(node.name):
            raise self.ctx.fail(node, f"aggregate function {node.name} is not allowed here")
        if node.name == "COALESCE":
            args = tuple(self.bind(a) for a in node.args)
            if any(isinstance(a.type, TensorType) for a in args):
                raise self.ctx.fail(node, "COALESCE takes keys; tensors are never NULL (a missing tile is zeros)")
            for arg_node, arg in zip(node.args, args):  # its type is a key's: a string would reach kernels
                self.check_number(arg_node, arg, "COALESCE")
            return bx.Coalesce(args)
        function = lookup_function(node.name)
        if function is None:
            raise self.ctx.fail(node, f'function "{node.name}" does not exist',
                                hint=did_you_mean(node.name, function_names()))
        return self.call(node, function, [self._bind_argument(a) for a in node.args], node.args)

    def _bind_argument(self, node: ast.Expr) -> bx.Bound:
        """A kernel function's argument; a tuple `(d0, d1, ...)` of integer constants is one constant (a shape)."""
        if not isinstance(node, ast.TupleExpr):
            return self.bind(node)
        values = []
        for item in node.items:
            bound = self.bind(item)
            value = bound.value if isinstance(bound, bx.Const) else None
            if not isinstance(value, int) or isinstance(value, bool):
                raise self.ctx.fail(item, "a tuple holds integer constants (a shape such as (2, -1))",
                                    hint="write the sizes as integer literals or ? parameters")
            values.append(value)
        return constant(tuple(values))

    def _bind_TupleExpr(self, node: ast.TupleExpr) -> bx.Bound:
        raise self.ctx.fail(node, "a tuple (a, b, ...) is only allowed as a kernel function's argument, "
                                  "such as RESHAPE's new shape", hint="remove the comma, or the parentheses")

    # ------------------------------------------------------------ kernels

    def call(self, node: Any, function: KernelFunction, args: list[bx.Bound],
             arg_nodes: Optional[Sequence[ast.Expr]] = None) -> bx.Bound:
        """A kernel call with its result type, or an error naming the function and the shapes."""
        for position in function.const_positions:
            if position < len(args) and not isinstance(args[position], bx.Const):
                raise self.ctx.fail(node, f"{function.name}: argument {position + 1} must be a constant")
        for position, arg in enumerate(args):  # a value argument: a tensor or a number, never a str or list
            if position not in function.const_positions and isinstance(arg, bx.Const):
                self.check_number(arg_nodes[position] if arg_nodes else node, arg, function.name)
        try:
            result = function.infer([to_arg(a) for a in args])
        except KernelSignatureError as exc:
            raise self.ctx.fail(node, str(exc), hint=exc.hint or _tiles_hint(function.name, args)) from None
        if all(isinstance(a, bx.Const) for a in args) and not any(isinstance(a.type, TensorType) for a in args):
            return self._fold(node, function, args)
        extent = self._checked_extent(node, function, args, result.shape, arg_nodes)
        return bx.Call(function, tuple(args), TensorType(np.dtype(result.dtype), tuple(result.shape or ()), extent))

    def _checked_extent(self, node: Any, function: KernelFunction, args: list[bx.Bound], tile: Optional[tuple],
                        arg_nodes: Optional[Sequence[ast.Expr]]) -> tuple:
        """The result's extent; tensors whose tiles line up while the whole tensors do not (A is 1000x800,
        C is 1000x600, joined on A.j = C.i) are refused: edge tiles would not fit at run time, or a product
        would silently cover only the overlap."""
        try:
            return self._extent(function, args, tile, strict=True)
        except KernelSignatureError as exc:
            tensors = [a for a in args if isinstance(a.type, TensorType)]
            if len(tensors) < 2 or _padded(function, tensors):
                return (None,) * len(tile or ())
            shapes = ", ".join(f"{self._text(arg_nodes[i]) if arg_nodes else f'operand {i + 1}'} is "
                               f"{'x'.join(map(str, a.type.extent)) or 'a scalar'}"
                               for i, a in enumerate(args) if isinstance(a.type, TensorType))
            reason = str(exc).split(": ", 1)[-1]
            raise self.ctx.fail(node, f"{function.name}: the whole tensors do not line up ({shapes}): {reason}",
                                hint="join the keys of axes that have the same size") from None

    def _text(self, node: Any) -> str:
        span = getattr(node, "span", None)
        if span is None or span.end <= span.start:
            return "an operand"
        return self.ctx.text[span.start:span.end]

    def _fold(self, node: Any, function: KernelFunction, args: list[bx.Bound]) -> bx.Bound:
        try:
            return constant(function.call(NUMPY_BACKEND, [a.value for a in args]))
        except Exception as exc:
            raise self.ctx.fail(node, f"{function.name}: {exc}") from None

    @staticmethod
    def _extent(function: KernelFunction, args: list[bx.Bound], tile: Optional[tuple], strict: bool = False) -> tuple:
        """Logical extent of the result: the same shape rule applied to the arguments' extents (None where
        unknown). `strict`: extents the rule refuses raise its KernelSignatureError."""
        rank = len(tile or ())
        known = all(None not in a.type.extent for a in args if isinstance(a.type, TensorType))
        if known:
            try:
                shape = function.infer([to_arg(a, as_extent=True) for a in args]).shape
                if shape is not None and len(shape) == rank:
                    return tuple(shape)
            except KernelSignatureError:
                if strict:
                    raise
        return (None,) * rank


def _padded(function: KernelFunction, tensors: list[bx.Bound]) -> bool:
    """An elementwise kernel of whole tensors that differ only on axes cut into whole tiles of one size:
    their tiles line up, and where one has no tile (beyond its edge) the tile is zeros, as an outer
    join pads (A (4x4) FULL JOIN B (4x2) sums to 4x4)."""
    if not function.elementwise:
        return False
    tiles = {a.type.tile for a in tensors}
    if len(tiles) != 1:
        return False
    tile = next(iter(tiles))
    return all(all(e % t == 0 for e, t in zip(a.type.extent, tile) if t) for a in tensors)


def is_key_like(expr: bx.Bound) -> bool:
    return isinstance(expr.type, KeyType) or (isinstance(expr.type, ScalarType) and expr.type.python_type is int)


def _tiles_hint(function: str, args: list[bx.Bound]) -> Optional[str]:
    """The hint for a kernel call whose tiles misfit: tensors stored in different tiles (two left without
    TILE can get different ones, by their sizes) are refused tile by tile, though the whole tensors may fit."""
    tiles = [a.type.tile for a in args if isinstance(a.type, TensorType) and a.type.tile]
    if len(tiles) < 2 or len(set(tiles)) < 2:
        return None
    retiled = ", or use EINSUM, which retiles its operands" if function == "MATMUL" else ""
    return (f"the operands are stored in different tiles ({' and '.join('x'.join(map(str, t)) for t in tiles)}): "
            f"store them with matching TILE (...){retiled}")
