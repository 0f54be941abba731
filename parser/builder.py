"""Turn the lark parse tree of one trql statement into AST nodes, each with its source span."""
from __future__ import annotations

import difflib

from lark import Token, Tree

from . import ast
from .errors import ParseError

# FILL kind -> (fewest, most) arguments.
FILL_ARITY = {
    "ZEROS": (0, 0), "ONES": (0, 0), "IDENTITY": (0, 0), "CONSTANT": (1, 1),
    "RANDOM_NORMAL": (2, 3), "RANDOM_UNIFORM": (2, 3),
}
EXPLAIN_FORMATS = ("text", "json", "dot")
KEYWORD_VALUES = {"TRUE": True, "FALSE": False, "NULL": None}


def span_of(meta) -> ast.Span:
    """The Span of a lark Meta or Token (both carry line, column, start_pos, end_pos)."""
    if getattr(meta, "empty", False):
        return ast.NO_SPAN
    return ast.Span(meta.line, meta.column, meta.start_pos, meta.end_pos)


class _Sizes(tuple):
    """A parenthesized list of integers as written: the ints, and each one's token (for a caret under it)."""

    def __new__(cls, tokens):
        tokens = [c for c in tokens if c is not None]
        sizes = super().__new__(cls, (int(c) for c in tokens))
        sizes.tokens = tokens
        return sizes


def unquote(token: Token) -> str:
    """The value of a '...' string or "..." identifier token, doubled quotes undone."""
    quote = token[0]
    return token[1:-1].replace(quote * 2, quote)


def is_plain(query: ast.Query) -> bool:
    """True when a query is just its body (no WITH, ORDER BY, LIMIT or OFFSET)."""
    return not (query.ctes or query.order_by) and query.limit is None and query.offset is None


def bare_word_to_literal(expr):
    """An unqualified name used as a value (`optimizer = adam`) is the string 'adam'."""
    if isinstance(expr, ast.ColumnRef) and expr.qualifier is None:
        return ast.Literal(expr.name, expr.span)
    return expr


def bare(node_class):
    """A builder method for a statement that is only its keywords (BEGIN, SHOW TENSORS, ...)."""
    return lambda self, meta, children: node_class(span_of(meta))


class Builder:
    """Builds the AST bottom-up, one method per grammar rule or alias, called with the rule's
    positions (a lark Meta) and its built children (see `leaf` for tokens).

    A hand visitor rather than a lark Transformer, whose per-node wrapping costs more than the
    building itself. One instance per statement: it numbers the `?` parameters in text order.
    """

    def __init__(self, text: str):
        self.text = text
        self.params = 0
        self.style: str | None = None  # the statement's placeholder style
        self.names: dict[str, int] = {}  # $name -> its index

    def build(self, tree: Tree):
        children = [self.build(c) if type(c) is Tree else self.leaf(c) for c in tree.children]
        return getattr(self, tree.data)(tree.meta, children)

    def leaf(self, token: Token | None):
        """NAME -> str; PARAM -> Param (numbered here, in text order); other tokens unchanged."""
        if token is None or token.type not in ("NAME", "PARAM"):
            return token
        if token.type == "PARAM":
            return self.param(token)
        if token[0] != '"':
            return str(token)
        if token == '""':
            raise self.error("zero-length quoted identifier", token)
        return unquote(token)

    def param(self, token: Token) -> ast.Param:
        """Number a placeholder; one statement uses one style (`?`, `$1` or `$name`), as in DuckDB."""
        style = "?" if token == "?" else "$1" if token[1:].isdigit() else "$name"
        if self.style not in (None, style):
            raise self.error(f"a statement cannot mix {self.style} and {style} parameters", token,
                             hint="use one style of placeholder throughout the statement")
        self.style = style
        if style == "?":
            self.params += 1
            return ast.Param(self.params - 1, span_of(token))
        if style == "$1":
            if int(token[1:]) < 1:
                raise self.error("parameters are numbered from $1", token)
            return ast.Param(int(token[1:]) - 1, span_of(token))
        name = token[1:].lower()
        index = self.names.setdefault(name, len(self.names))
        return ast.Param(index, span_of(token), name)

    def error(self, message: str, where, hint: str | None = None) -> ParseError:
        return ParseError(message, self.text, where.line, where.column, hint)

    # ------------------------------------------------------------ names and literals

    def int_literal(self, meta, children):
        return ast.Literal(int(children[0]), span_of(meta))

    def float_literal(self, meta, children):
        return ast.Literal(float(children[0]), span_of(meta))

    def string_literal(self, meta, children):
        return ast.Literal(unquote(children[0]), span_of(meta))

    def keyword_literal(self, meta, children):
        return ast.Literal(KEYWORD_VALUES[children[0].upper()], span_of(meta))

    def signed_number(self, meta, children):
        sign, token = children
        value = float(token) if token.type == "FLOAT" else int(token)
        return ast.Literal(-value if sign == "-" else value, span_of(meta))

    def bare_word(self, meta, children):
        return ast.Literal(children[0], span_of(meta))

    def on_word(self, meta, children):  # `SET progress = on`: ON is reserved elsewhere
        return ast.Literal(self.text[meta.start_pos:meta.end_pos], span_of(meta))

    def alias(self, meta, children):
        return children[0]

    def key_list(self, meta, children):
        return tuple(c for c in children if c is not None)

    name_list = key_list

    def int_tuple(self, meta, children):
        return _Sizes(children)

    def dtype(self, meta, children):
        return children[0].lower()

    # ------------------------------------------------------------ expressions

    def expr_list(self, meta, children):
        return tuple(children)

    def or_op(self, meta, children):
        return ast.BinaryOp("OR", children[0], children[1], span_of(meta))

    def and_op(self, meta, children):
        return ast.BinaryOp("AND", children[0], children[1], span_of(meta))

    def not_op(self, meta, children):
        return ast.UnaryOp("NOT", children[0], span_of(meta))

    def comparison_op(self, meta, children):
        return "<>" if children[0] == "!=" else str(children[0])

    add_op = mul_op = comparison_op

    def keyword(self, meta, children):
        return children[0].upper()

    order_direction = join_kind = drop_kind = keyword

    def comparison(self, meta, children):
        return ast.BinaryOp(children[1], children[0], children[2], span_of(meta))

    def binary(self, meta, children):
        if children[1] == "@":  # numpy's and PyTorch's matrix product: MATMUL(a, b)
            return ast.FuncCall("MATMUL", (children[0], children[2]), span=span_of(meta))
        return self.comparison(meta, children)

    def negated(self, meta, children):
        return True

    def between(self, meta, children):
        operand, negated, low, high = children
        return ast.Between(operand, low, high, bool(negated), span_of(meta))

    def in_list(self, meta, children):
        operand, negated, items = children
        return ast.InList(operand, items, bool(negated), span_of(meta))

    def is_null(self, meta, children):
        return ast.IsNull(children[0], bool(children[1]), span_of(meta))

    def unary_op(self, meta, children):
        op, operand = children
        numeric = isinstance(operand, ast.Literal) and type(operand.value) in (int, float)
        if numeric:  # fold `-1.5` into one literal, as users read it
            return ast.Literal(-operand.value if op == "-" else operand.value, span_of(meta))
        return ast.UnaryOp(op, operand, span_of(meta))

    def column_ref(self, meta, children):
        qualifier = children[0] if len(children) == 2 else None
        return ast.ColumnRef(qualifier, children[-1], span_of(meta))

    def star_args(self, meta, children):
        return "*"

    def function_args(self, meta, children):
        return bool(children[0]), children[1]

    def distinct(self, meta, children):
        return True

    def function_call(self, meta, children):
        name, args = children[0].upper(), children[1]
        if args == "*":
            if name != "COUNT":
                raise self.error(f"{name}(*) is not allowed; only COUNT(*)", meta)
            return ast.FuncCall(name, (), star=True, span=span_of(meta))
        distinct, exprs = args if args else (False, ())
        return ast.FuncCall(name, exprs, distinct=distinct, span=span_of(meta))

    def tuple_expr(self, meta, children):
        first, rest = children
        return ast.TupleExpr((first, *(rest or ())), span_of(meta))

    def cast(self, meta, children):
        return ast.Cast(children[0], children[1].lower(), span_of(meta))

    # ------------------------------------------------------------ queries

    def query(self, meta, children):
        ctes, body, order_by, limit, offset = children
        if isinstance(body, ast.Query):  # the body is one parenthesised query
            if ctes is None and order_by is None and limit is None and offset is None:
                return body
            if not is_plain(body):
                raise self.error("a parenthesised query with its own WITH, ORDER BY, LIMIT or "
                                 "OFFSET cannot take more of them", meta)
            body = body.body
        return ast.Query(body, ctes or (), order_by or (), limit, offset, span_of(meta))

    def paren_query(self, meta, children):
        return children[0]

    def set_op(self, meta, children):
        left, union_all, right = (q.body if isinstance(q, ast.Query) and is_plain(q) else q
                                  for q in children)
        return ast.SetOp(left, right, union_all, span_of(meta))

    def union(self, meta, children):
        return any(c is not None and c.upper() == "ALL" for c in children)

    def with_clause(self, meta, children):
        return tuple(children)

    def cte(self, meta, children):
        return ast.Cte(children[0], children[1], span_of(meta))

    def select(self, meta, children):
        distinct, items, (from_items, where, group_by, having) = children[0], children[1:-4], children[-4:]
        return ast.Select(tuple(items), from_items or (), where, group_by or (), bool(distinct),
                          span_of(meta), having)

    def select_expr(self, meta, children):
        return ast.SelectItem(children[0], children[1], span_of(meta))

    def star(self, meta, children):
        return ast.SelectItem(ast.Star(None, span_of(meta)), None, span_of(meta))

    def qualified_star(self, meta, children):
        return ast.SelectItem(ast.Star(children[0], span_of(meta)), None, span_of(meta))

    def from_clause(self, meta, children):
        return tuple(children)

    def where_clause(self, meta, children):
        return children[0]

    group_clause = having_clause = limit_clause = offset_clause = where_clause
    order_clause = from_clause

    def order_item(self, meta, children):
        expr, direction, nulls = children
        descending = direction == "DESC"
        nulls_first = descending if nulls is None else nulls == "FIRST"  # without NULLS, PostgreSQL's default
        return ast.OrderItem(expr, descending, span_of(meta), nulls_first)

    def nulls_order(self, meta, children):
        return children[-1].upper()

    def join(self, meta, children):
        left, kind, right, condition = children
        kind = kind or "INNER"
        if kind == "CROSS" and condition is not None:
            raise self.error("CROSS JOIN takes no ON condition", condition.span)
        if kind != "CROSS" and condition is None:  # PostgreSQL and DuckDB refuse it too: no silent cross join
            raise self.error(f"{kind} JOIN needs an ON condition", getattr(right, "span", None) or span_of(meta),
                             hint="JOIN ... ON A.j = B.i; for every pair of tuples write CROSS JOIN (or a comma)")
        return ast.JoinRef(kind, left, right, condition, span_of(meta))

    def table_ref(self, meta, children):
        return ast.TableRef(children[0], children[1], span_of(meta))

    def subquery_ref(self, meta, children):
        return ast.SubqueryRef(children[0], children[1], span_of(meta))

    def einsum_ref(self, meta, children):
        spec, operands, alias = children[0], children[1:-1], children[-1]
        return ast.EinsumRef(unquote(spec), tuple(operands), alias, span_of(meta))

    def grad_ref(self, meta, children):
        return ast.GradRef(children[0], children[1], children[2], span_of(meta))

    def retile_ref(self, meta, children):
        return ast.RetileRef(children[0], tuple(children[1]), children[2], span_of(meta))

    # ------------------------------------------------------------ create

    def tensor_head(self, meta, children):
        """CREATE [OR REPLACE] TENSOR [IF NOT EXISTS] -> the two flags, as keyword arguments."""
        or_replace, if_not_exists = bool(children[0]), bool(children[1])
        if or_replace and if_not_exists:
            raise self.error("OR REPLACE and IF NOT EXISTS cannot both be given", meta)
        return {"or_replace": or_replace, "if_not_exists": if_not_exists}

    def create_tensor(self, meta, children):
        head, name, keys, shape, tile, *options = children
        shape, tile = self.fitting_tile(shape, tile)
        chosen = {}
        for kind, value, where in options:
            if kind in chosen:
                raise self.error(f"{kind} is given twice", where)
            chosen[kind] = value
        if "FILL" in chosen and "LOCATION" in chosen:
            raise self.error("an external tensor (LOCATION) has no FILL: its tiles are the dataset's", meta)
        return ast.CreateTensor(name, keys, shape, tile, chosen.get("DTYPE"), chosen.get("FILL"),
                                span=span_of(meta), location=chosen.get("LOCATION"), **head)

    def fitting_tile(self, shape: "_Sizes", tile: "_Sizes") -> tuple[tuple[int, ...], tuple[int, ...]]:
        """SHAPE and TILE as plain tuples; a TILE size past its SHAPE size is an error under that size (it was
        silently cut to the shape, which hid a swapped or mistyped pair)."""
        for axis, (size, cut) in enumerate(zip(shape, tile)):
            if cut > size > 0:
                fitted = ", ".join(str(min(s, c)) for s, c in zip(shape, tile))
                raise self.error(f"TILE {tuple(tile)} does not fit SHAPE {tuple(shape)}: {cut} > {size} on axis {axis}",
                                 tile.tokens[axis], hint=f"TILE ({fitted}) covers that axis with one tile")
        return tuple(shape), tuple(tile)

    def dtype_option(self, meta, children):
        return "DTYPE", children[0].lower(), meta

    def location_option(self, meta, children):
        return "LOCATION", unquote(children[0]), meta

    def fill_option(self, meta, children):
        kind, args = children[0].upper(), children[1] or ()
        if kind not in FILL_ARITY:
            close = difflib.get_close_matches(kind, FILL_ARITY, n=1)
            hint = f"did you mean {close[0]}?" if close else "FILL takes " + ", ".join(FILL_ARITY)
            raise self.error(f"unknown FILL kind {children[0]}", meta, hint)
        fewest, most = FILL_ARITY[kind]
        if not fewest <= len(args) <= most:
            wanted = str(fewest) if fewest == most else f"{fewest} or {most}"
            raise self.error(f"FILL {kind} takes {wanted} argument(s), got {len(args)}", meta)
        return "FILL", ast.Fill(kind, args, span_of(meta)), meta

    def source(self, token_or_param):
        return unquote(token_or_param) if isinstance(token_or_param, Token) else token_or_param

    def create_tensor_from(self, meta, children):
        head, name, keys, source, tile, dtype = children
        return ast.CreateTensorFrom(name, keys, self.source(source), tile, dtype, span=span_of(meta), **head)

    def tile_clause(self, meta, children):
        return tuple(children[0])

    def create_coo(self, meta, children):
        head, name, keys, source, columns, shape, tile, dtype = children
        shape, tile = self.fitting_tile(shape, tile)
        if len(columns) < 2:
            raise self.error("FROM COO needs index columns and a value column", meta)
        return ast.CreateTensorFromCoo(name, keys, self.source(source), columns, shape, tile,
                                       dtype, span=span_of(meta), **head)

    def coo_table(self, meta, children):
        return ast.TableRef(children[0], None, span_of(meta))

    def coo_query(self, meta, children):
        return ast.SubqueryRef(children[0], None, span_of(meta))

    def create_tensor_as(self, meta, children):
        head, name, keys, query = children
        return ast.CreateTensorAs(name, query, keys, span=span_of(meta), **head)

    def create_view(self, meta, children):
        or_replace, if_not_exists, name, query = children
        if or_replace and if_not_exists:
            raise self.error("OR REPLACE and IF NOT EXISTS cannot both be given", meta)
        text = self.text[query.span.start:query.span.end]
        return ast.CreateView(name, query, text, bool(or_replace), bool(if_not_exists), span_of(meta))

    def or_replace(self, meta, children):
        return True

    if_exists = if_not_exists = analyze = or_replace

    # ------------------------------------------------------------ change

    def insert_values(self, meta, children):
        return ast.InsertValues(children[0], tuple(children[1:]), span_of(meta))

    def row(self, meta, children):
        return children[0]

    def insert_query(self, meta, children):
        return ast.InsertQuery(children[0], children[1], span_of(meta))

    def update(self, meta, children):
        table, alias, assignments, (from_items, where) = (
            children[0], children[1], children[2:-2], children[-2:])
        return ast.Update(table, tuple(assignments), from_items or (), where, alias, span_of(meta))

    def assignment(self, meta, children):
        return ast.Assignment(children[0], children[1], span_of(meta))

    def delete(self, meta, children):
        return ast.Delete(children[0], children[2], children[1], span_of(meta))

    def drop(self, meta, children):
        return ast.Drop(children[0], children[2], bool(children[1]), span_of(meta))

    def alter_rename(self, meta, children):
        return ast.AlterRename(children[0], children[1], children[2], span_of(meta))

    # ------------------------------------------------------------ look, session, learning

    def copy_to(self, meta, children):
        source, path, options = children
        return ast.CopyTo(source, unquote(path), options or (), span_of(meta))

    def copy_from(self, meta, children):
        name, path, options = children
        return ast.CopyFrom(name, unquote(path), options or (), span_of(meta))

    def copy_options(self, meta, children):
        return tuple(children)

    def copy_option(self, meta, children):
        name, value = children
        if isinstance(value, Token):
            value = unquote(value) if value.type == "STRING" else str(value)
        elif isinstance(value, ast.Literal):  # TRUE, FALSE, NULL
            value = str(value.value).lower()
        return name.upper(), value

    def export_database(self, meta, children):
        return ast.ExportDatabase(unquote(children[0]), span_of(meta))

    def import_database(self, meta, children):
        return ast.ImportDatabase(unquote(children[0]), span_of(meta))

    def query_statement(self, meta, children):
        return ast.QueryStatement(children[0], span_of(meta))

    show_tensors, show_views = bare(ast.ShowTensors), bare(ast.ShowViews)
    begin, commit, rollback = bare(ast.Begin), bare(ast.Commit), bare(ast.Rollback)

    def show_tables(self, meta, children):
        return ast.ShowTables(bool(children[0]), span_of(meta))

    show_all = bare(ast.ShowAll)

    def all_word(self, meta, children):
        return True

    def show_setting(self, meta, children):
        return ast.ShowSetting(children[0], span_of(meta))

    def describe(self, meta, children):
        return ast.Describe(children[0], span_of(meta))

    def describe_query(self, meta, children):
        return ast.DescribeQuery(children[0], span_of(meta))

    def summarize(self, meta, children):
        return ast.Summarize(children[0], span_of(meta))

    def summarize_query(self, meta, children):
        return ast.SummarizeQuery(children[0], span_of(meta))

    def explain(self, meta, children):
        analyze, options, statement = children
        chosen = dict(options or ())
        return ast.Explain(statement, bool(analyze) or chosen.get("ANALYZE", False), chosen.get("FORMAT", "text"),
                           span_of(meta))

    def explain_options(self, meta, children):
        return tuple(children)

    def format_option(self, meta, children):
        name = children[0].lower()
        name = "dot" if name == "graphviz" else name  # DuckDB's name for it
        if name not in EXPLAIN_FORMATS:
            close = difflib.get_close_matches(name, EXPLAIN_FORMATS, n=1)
            raise self.error(f"unknown EXPLAIN format {children[0]}", meta,
                             f"did you mean {close[0]}?" if close else "formats: " + ", ".join(EXPLAIN_FORMATS))
        return "FORMAT", name

    def analyze_option(self, meta, children):
        return "ANALYZE", True

    def set_setting(self, meta, children):
        return ast.SetSetting(children[0], children[1], span_of(meta))

    def reset_setting(self, meta, children):
        return ast.ResetSetting(children[0], span_of(meta))

    def transaction(self, meta, children):
        return None

    def minimize(self, meta, children):
        view, params, options = children
        return ast.Minimize(view, params, options or (), span_of(meta))

    def minimize_options(self, meta, children):
        return tuple(children)

    def option(self, meta, children):
        return children[0], bare_word_to_literal(children[1])

    def single_statement(self, meta, children):
        return children[0]

    single_expression = single_statement
