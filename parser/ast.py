"""The trql abstract syntax tree: small frozen dataclasses, each carrying its source span."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional, Union


@dataclass(frozen=True)
class Span:
    """Where a node came from: 1-based line and column, 0-based character offsets [start, end)."""

    line: int = 0
    column: int = 0
    start: int = 0
    end: int = 0


NO_SPAN = Span()


def _span() -> Span:
    return field(default=NO_SPAN, compare=False, repr=False)


# ---------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Literal:
    value: Union[int, float, str, bool, None]
    span: Span = _span()


@dataclass(frozen=True)
class Param:
    """A `?` placeholder (index counts them from 0 in text order), `$n` (index n - 1) or `$name` (index: the
    name's place among the statement's distinct names, in order of first use; `name` keeps it)."""

    index: int
    span: Span = _span()
    name: Optional[str] = None


@dataclass(frozen=True)
class ColumnRef:
    qualifier: Optional[str]
    name: str
    span: Span = _span()


@dataclass(frozen=True)
class Star:
    """`*` or `alias.*` in a select list."""

    qualifier: Optional[str]
    span: Span = _span()


@dataclass(frozen=True)
class BinaryOp:
    """op: + - * / // % = <> < <= > >= AND OR (`!=` is normalised to `<>`; `a @ b` is parsed as MATMUL(a, b))."""

    op: str
    left: "Expr"
    right: "Expr"
    span: Span = _span()


@dataclass(frozen=True)
class UnaryOp:
    """op: - + NOT."""

    op: str
    operand: "Expr"
    span: Span = _span()


@dataclass(frozen=True)
class FuncCall:
    """A function or aggregate call; name is upper-case. COUNT(*) has star=True and no args."""

    name: str
    args: tuple["Expr", ...]
    star: bool = False
    distinct: bool = False
    span: Span = _span()


@dataclass(frozen=True)
class Cast:
    """CAST(expr AS type_name); type_name is lower-case (float32, bigint, ...)."""

    operand: "Expr"
    type_name: str
    span: Span = _span()


@dataclass(frozen=True)
class Between:
    operand: "Expr"
    low: "Expr"
    high: "Expr"
    negated: bool = False
    span: Span = _span()


@dataclass(frozen=True)
class TupleExpr:
    """`(a, b, ...)`: a parenthesised list of two or more expressions, or `(a,)`; RESHAPE's new shape."""

    items: tuple["Expr", ...]
    span: Span = _span()


@dataclass(frozen=True)
class InList:
    operand: "Expr"
    items: tuple["Expr", ...]
    negated: bool = False
    span: Span = _span()


@dataclass(frozen=True)
class IsNull:
    operand: "Expr"
    negated: bool = False
    span: Span = _span()


Expr = Union[Literal, Param, ColumnRef, Star, BinaryOp, UnaryOp, FuncCall, Cast, Between, InList, IsNull, TupleExpr]


# ---------------------------------------------------------------- queries


@dataclass(frozen=True)
class SelectItem:
    expr: Expr
    alias: Optional[str] = None
    span: Span = _span()


@dataclass(frozen=True)
class OrderItem:
    expr: Expr
    descending: bool = False
    span: Span = _span()
    nulls_first: bool = False  # NULLS FIRST; without NULLS, as PostgreSQL: first where descending


@dataclass(frozen=True)
class TableRef:
    name: str
    alias: Optional[str] = None
    span: Span = _span()


@dataclass(frozen=True)
class JoinRef:
    """kind: INNER, LEFT, RIGHT, FULL or CROSS (`a, b` in FROM is a CROSS join with no condition)."""

    kind: str
    left: "FromItem"
    right: "FromItem"
    condition: Optional[Expr] = None
    span: Span = _span()


@dataclass(frozen=True)
class SubqueryRef:
    query: "Query"
    alias: Optional[str] = None
    span: Span = _span()


@dataclass(frozen=True)
class EinsumRef:
    """EINSUM('spec', operand, ...) in FROM: whole-tensor Einstein summation."""

    spec: str
    operands: tuple["FromItem", ...]
    alias: Optional[str] = None
    span: Span = _span()


@dataclass(frozen=True)
class GradRef:
    """GRAD(view, param) in FROM."""

    view: str
    param: str
    alias: Optional[str] = None
    span: Span = _span()


@dataclass(frozen=True)
class RetileRef:
    """RETILE(operand, (t, ...)) in FROM."""

    operand: "FromItem"
    tile: tuple[int, ...]
    alias: Optional[str] = None
    span: Span = _span()


FromItem = Union[TableRef, JoinRef, SubqueryRef, EinsumRef, GradRef, RetileRef]


@dataclass(frozen=True)
class Select:
    items: tuple[SelectItem, ...]
    from_items: tuple[FromItem, ...] = ()
    where: Optional[Expr] = None
    group_by: tuple[Expr, ...] = ()
    distinct: bool = False
    span: Span = _span()
    having: Optional[Expr] = None  # a condition on the groups (their keys and aggregates)


@dataclass(frozen=True)
class SetOp:
    """`left UNION ALL right` (all=False for plain UNION)."""

    left: Union[Select, "SetOp", "Query"]
    right: Union[Select, "SetOp", "Query"]
    all: bool = True
    span: Span = _span()


@dataclass(frozen=True)
class Cte:
    name: str
    query: "Query"
    span: Span = _span()


@dataclass(frozen=True)
class Query:
    """A full query: WITH ctes, a body, then ORDER BY / LIMIT / OFFSET over the whole body."""

    body: Union[Select, SetOp]
    ctes: tuple[Cte, ...] = ()
    order_by: tuple[OrderItem, ...] = ()
    limit: Optional[Expr] = None
    offset: Optional[Expr] = None
    span: Span = _span()


# ---------------------------------------------------------------- statements


@dataclass(frozen=True)
class QueryStatement:
    query: Query
    span: Span = _span()


@dataclass(frozen=True)
class Fill:
    """kind: ZEROS, ONES, CONSTANT, IDENTITY, RANDOM_NORMAL or RANDOM_UNIFORM; args are expressions."""

    kind: str
    args: tuple[Expr, ...] = ()
    span: Span = _span()


@dataclass(frozen=True)
class CreateTensor:
    name: str
    keys: Optional[tuple[str, ...]]
    shape: tuple[int, ...]
    tile: tuple[int, ...]
    dtype: Optional[str] = None
    fill: Optional[Fill] = None
    or_replace: bool = False
    if_not_exists: bool = False
    span: Span = _span()
    location: Optional[str] = None  # LOCATION 'uri': an external tensor, its tiles in a Parquet dataset there


@dataclass(frozen=True)
class CreateTensorFrom:
    """FROM 'file.npy' (source is a str) or FROM ? (source is a Param); TILE may be left out."""

    name: str
    keys: Optional[tuple[str, ...]]
    source: Union[str, Param]
    tile: Optional[tuple[int, ...]]  # None: trdb chooses
    dtype: Optional[str] = None
    or_replace: bool = False
    if_not_exists: bool = False
    span: Span = _span()


@dataclass(frozen=True)
class CreateTensorFromCoo:
    """FROM COO source (index_col, ..., value_col): source is a file path str, a Param, a TableRef or a
    SubqueryRef (a query over ordinary tables, which DuckDB runs as written)."""

    name: str
    keys: Optional[tuple[str, ...]]
    source: Union[str, Param, TableRef, SubqueryRef]
    columns: tuple[str, ...]
    shape: tuple[int, ...]
    tile: tuple[int, ...]
    dtype: Optional[str] = None
    or_replace: bool = False
    if_not_exists: bool = False
    span: Span = _span()


@dataclass(frozen=True)
class CreateTensorAs:
    name: str
    query: Query
    keys: Optional[tuple[str, ...]] = None
    or_replace: bool = False
    if_not_exists: bool = False
    span: Span = _span()


@dataclass(frozen=True)
class CreateView:
    """query_text is the view's query exactly as written (stored in the catalog)."""

    name: str
    query: Query
    query_text: str
    or_replace: bool = False
    if_not_exists: bool = False
    span: Span = _span()


@dataclass(frozen=True)
class InsertValues:
    table: str
    rows: tuple[tuple[Expr, ...], ...]
    span: Span = _span()


@dataclass(frozen=True)
class InsertQuery:
    table: str
    query: Query
    span: Span = _span()


@dataclass(frozen=True)
class Assignment:
    column: str
    expr: Expr
    span: Span = _span()


@dataclass(frozen=True)
class Update:
    table: str
    assignments: tuple[Assignment, ...]
    from_items: tuple[FromItem, ...] = ()
    where: Optional[Expr] = None
    alias: Optional[str] = None
    span: Span = _span()


@dataclass(frozen=True)
class Delete:
    table: str
    where: Optional[Expr] = None
    alias: Optional[str] = None
    span: Span = _span()


@dataclass(frozen=True)
class Drop:
    """kind: TENSOR, VIEW or TABLE."""

    kind: str
    name: str
    if_exists: bool = False
    span: Span = _span()


@dataclass(frozen=True)
class AlterRename:
    """ALTER {TENSOR | VIEW | TABLE} name RENAME TO new_name."""

    kind: str
    name: str
    new_name: str
    span: Span = _span()


@dataclass(frozen=True)
class ShowTensors:
    span: Span = _span()


@dataclass(frozen=True)
class ShowViews:
    span: Span = _span()


@dataclass(frozen=True)
class ShowTables:
    """SHOW TABLES (names and kinds) or SHOW ALL TABLES (DuckDB's columns)."""

    all: bool = False
    span: Span = _span()


@dataclass(frozen=True)
class ShowAll:
    """SHOW ALL: trdb's settings and their values."""

    span: Span = _span()


@dataclass(frozen=True)
class Describe:
    name: str
    span: Span = _span()


@dataclass(frozen=True)
class DescribeQuery:
    """DESCRIBE query, or DESCRIBE (query): the schema of the query's result."""

    query: Query
    span: Span = _span()


@dataclass(frozen=True)
class Summarize:
    """SUMMARIZE name: statistics of a tensor's values, per column as DuckDB's SUMMARIZE."""

    name: str
    span: Span = _span()


@dataclass(frozen=True)
class SummarizeQuery:
    """SUMMARIZE query, or SUMMARIZE (query): statistics of the query's result."""

    query: Query
    span: Span = _span()


@dataclass(frozen=True)
class Explain:
    """format: text, json or dot (Graphviz)."""

    statement: "Statement"
    analyze: bool = False
    format: str = "text"
    span: Span = _span()


@dataclass(frozen=True)
class SetSetting:
    """SET name = value (also SET name TO value); value is an expression (literal, identifier as str)."""

    name: str
    value: Expr
    span: Span = _span()


@dataclass(frozen=True)
class ResetSetting:
    name: str
    span: Span = _span()


@dataclass(frozen=True)
class ShowSetting:
    name: str
    span: Span = _span()


@dataclass(frozen=True)
class Begin:
    span: Span = _span()


@dataclass(frozen=True)
class Commit:
    span: Span = _span()


@dataclass(frozen=True)
class Rollback:
    span: Span = _span()


@dataclass(frozen=True)
class Minimize:
    view: str
    params: tuple[str, ...]
    options: tuple[tuple[str, Expr], ...] = ()
    span: Span = _span()


@dataclass(frozen=True)
class CopyTo:
    """COPY { name | (query) } TO 'path' [(option value, ...)]; option names upper-cased, values as written."""

    source: Union[str, Query]
    path: str
    options: tuple[tuple[str, Optional[str]], ...] = ()
    span: Span = _span()


@dataclass(frozen=True)
class CopyFrom:
    name: str
    path: str
    options: tuple[tuple[str, Optional[str]], ...] = ()
    span: Span = _span()


@dataclass(frozen=True)
class ExportDatabase:
    path: str
    span: Span = _span()


@dataclass(frozen=True)
class ImportDatabase:
    path: str
    span: Span = _span()


Statement = Union[
    QueryStatement, CreateTensor, CreateTensorFrom, CreateTensorFromCoo, CreateTensorAs, CreateView,
    InsertValues, InsertQuery, Update, Delete, Drop, AlterRename, ShowTensors, ShowViews, ShowTables, ShowAll, Describe,
    DescribeQuery, Summarize, SummarizeQuery, Explain,
    SetSetting, ResetSetting, ShowSetting, Begin, Commit, Rollback, Minimize,
    CopyTo, CopyFrom, ExportDatabase, ImportDatabase,
]


def walk(node):
    """Every AST node under `node`, itself first (depth first); spans are not nodes."""
    yield node
    if dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            for item in (value if isinstance(value, tuple) else (value,)):
                if isinstance(item, tuple):
                    for sub in item:
                        yield from walk(sub)
                elif dataclasses.is_dataclass(item) and not isinstance(item, Span):
                    yield from walk(item)
