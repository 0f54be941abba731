"""Parser tests: every statement kind, expressions, spans, parameters and syntax errors."""
from __future__ import annotations

import time

import pytest

from trdb.parser import ParseError, parse, parse_expression
from trdb.parser.ast import (
    Assignment,
    Begin,
    Between,
    BinaryOp,
    Cast,
    ColumnRef,
    Commit,
    CreateTensor,
    CreateTensorAs,
    CreateTensorFrom,
    CreateTensorFromCoo,
    CreateView,
    Cte,
    Delete,
    Describe,
    Drop,
    EinsumRef,
    Explain,
    Fill,
    FuncCall,
    GradRef,
    InList,
    InsertQuery,
    InsertValues,
    IsNull,
    JoinRef,
    Literal,
    Minimize,
    OrderItem,
    Param,
    Query,
    QueryStatement,
    ResetSetting,
    RetileRef,
    Rollback,
    Select,
    SelectItem,
    SetOp,
    SetSetting,
    ShowSetting,
    ShowTensors,
    ShowViews,
    Span,
    Star,
    SubqueryRef,
    TableRef,
    UnaryOp,
    Update,
)


def col(qualifier, name=None):
    return ColumnRef(None, qualifier) if name is None else ColumnRef(qualifier, name)


def lit(value):
    return Literal(value)


def select_of(text):
    statement = parse(text)
    assert isinstance(statement, QueryStatement)
    return statement.query.body


# ---------------------------------------------------------------- create


def test_create_tensor_with_every_clause():
    assert parse("CREATE TENSOR A (r, c) SHAPE (1024, 512) TILE (256, 256) DTYPE Float64 "
                 "FILL RANDOM_NORMAL(0, -1.5, 42);") == CreateTensor(
        "A", ("r", "c"), (1024, 512), (256, 256), "float64",
        Fill("RANDOM_NORMAL", (lit(0), lit(-1.5), lit(42))))


def test_create_tensor_minimal_and_fill_before_dtype():
    assert parse("create tensor x shape (3) tile (2)") == CreateTensor("x", None, (3,), (2,))
    statement = parse("CREATE TENSOR W SHAPE (4, 4) TILE (2, 2) FILL CONSTANT(?) DTYPE int32")
    assert statement.fill == Fill("CONSTANT", (Param(0),)) and statement.dtype == "int32"


@pytest.mark.parametrize("fill, expected", [
    ("ZEROS", Fill("ZEROS")), ("ones", Fill("ONES")), ("IDENTITY", Fill("IDENTITY")),
    ("RANDOM_UNIFORM(-1, 1)", Fill("RANDOM_UNIFORM", (lit(-1), lit(1)))),
])
def test_fill_kinds(fill, expected):
    assert parse(f"CREATE TENSOR W SHAPE (4) TILE (2) FILL {fill}").fill == expected


def test_create_tensor_from_file_and_param():
    assert parse("CREATE TENSOR A FROM 'data/a.npy' TILE (256, 256)") == CreateTensorFrom(
        "A", None, "data/a.npy", (256, 256))
    assert parse("CREATE TENSOR A (i, j) FROM ? TILE (2, 2) DTYPE float32") == CreateTensorFrom(
        "A", ("i", "j"), Param(0), (2, 2), "float32")


@pytest.mark.parametrize("source, expected", [
    ("'edges.parquet'", "edges.parquet"), ("'e.csv'", "e.csv"), ("?", Param(0)),
    ("edge_table", TableRef("edge_table")),
])
def test_create_tensor_from_coo(source, expected):
    statement = parse(f"CREATE TENSOR G (src, dst) FROM COO {source} (row, col, value) "
                      "SHAPE (100, 100) TILE (10, 10) DTYPE float64")
    assert statement == CreateTensorFromCoo("G", ("src", "dst"), expected, ("row", "col", "value"),
                                            (100, 100), (10, 10), "float64")


def test_create_tensor_as_and_zero_dimensional():
    statement = parse("CREATE TENSOR C (i, j) AS SELECT * FROM A")
    assert isinstance(statement, CreateTensorAs) and statement.keys == ("i", "j")
    assert statement.query.body.items == (SelectItem(Star(None)),)
    assert parse("CREATE TENSOR s () SHAPE () TILE ()") == CreateTensor("s", (), (), ())


def test_create_view_keeps_the_query_text_exactly():
    text = ("CREATE OR REPLACE VIEW loss AS\n  SELECT SUMSQ(A.v - B.v) AS v -- squared\n"
            "  FROM A JOIN B ON A.i = B.i WHERE A.j IN (1, 2) ;  -- done")
    statement = parse(text)
    assert isinstance(statement, CreateView) and statement.or_replace
    assert statement.query_text == ("SELECT SUMSQ(A.v - B.v) AS v -- squared\n"
                                    "  FROM A JOIN B ON A.i = B.i WHERE A.j IN (1, 2)")
    assert parse(statement.query_text) == QueryStatement(statement.query)
    assert not parse("create view v as (select 1)").or_replace


# ---------------------------------------------------------------- change


def test_insert_values_and_query():
    assert parse("INSERT INTO A VALUES (0, 1, ?), (-2, 3, ?)") == InsertValues(
        "A", ((lit(0), lit(1), Param(0)), (lit(-2), lit(3), Param(1))))
    statement = parse("INSERT INTO A SELECT i, j, v FROM B")
    assert isinstance(statement, InsertQuery) and statement.table == "A"


def test_update_gradient_step():
    statement = parse("UPDATE W SET v = W.v - 0.1 * G.v FROM GRAD(loss, W) AS G "
                      "WHERE W.i = G.i AND W.j = G.j")
    assert statement == Update(
        "W", (Assignment("v", BinaryOp("-", col("W", "v"),
                                       BinaryOp("*", lit(0.1), col("G", "v")))),),
        (GradRef("loss", "W", "G"),),
        BinaryOp("AND", BinaryOp("=", col("W", "i"), col("G", "i")),
                 BinaryOp("=", col("W", "j"), col("G", "j"))))


def test_update_with_alias_and_several_assignments():
    statement = parse("UPDATE W w SET v = 0, x = ? WHERE w.i = 1")
    assert statement.alias == "w" and [a.column for a in statement.assignments] == ["v", "x"]
    assert parse("UPDATE W AS w SET v = 1").alias == "w"


def test_delete_and_drop():
    assert parse("DELETE FROM A") == Delete("A")
    assert parse("DELETE FROM A AS a WHERE a.i = 1") == Delete(
        "A", BinaryOp("=", col("a", "i"), lit(1)), "a")
    assert parse("DROP TENSOR A") == Drop("TENSOR", "A")
    assert parse("drop view if exists v;") == Drop("VIEW", "v", if_exists=True)


# ---------------------------------------------------------------- look, session, learning


def test_show_describe_explain():
    assert parse("SHOW TENSORS") == ShowTensors()
    assert parse("show views") == ShowViews()
    assert parse("SHOW workers") == ShowSetting("workers")
    assert parse("DESCRIBE A") == Describe("A")
    explained = parse("EXPLAIN ANALYZE SELECT * FROM A")
    assert isinstance(explained, Explain) and explained.analyze
    assert isinstance(explained.statement, QueryStatement)
    assert parse("EXPLAIN UPDATE W SET v = 0") == Explain(Update("W", (Assignment("v", lit(0)),)))


@pytest.mark.parametrize("text, value", [
    ("SET workers = 4", 4), ("SET workers TO 4", 4), ("SET memory_limit = '4GB'", "4GB"),
    ("SET device = gpu", "gpu"), ("SET progress TO off", "off"), ("SET progress = on", "on"),
    ("SET x = true", True), ("SET x = FALSE", False), ("SET x = -0.5", -0.5),
])
def test_set(text, value):
    statement = parse(text)
    assert isinstance(statement, SetSetting) and statement.value == Literal(value)
    assert type(statement.value.value) is type(value)


def test_reset_and_transactions():
    assert parse("RESET workers") == ResetSetting("workers")
    for text in ("BEGIN", "begin transaction", "START TRANSACTION"):
        assert parse(text) == Begin()
    for text in ("COMMIT", "COMMIT WORK", "END"):
        assert parse(text) == Commit()
    for text in ("ROLLBACK;", "ABORT"):
        assert parse(text) == Rollback()


def test_minimize():
    assert parse("MINIMIZE loss WRT (W1, b1) WITH (optimizer = 'adam', learning_rate = 1e-3, "
                 "steps = ?, schedule = cosine)") == Minimize(
        "loss", ("W1", "b1"),
        (("optimizer", lit("adam")), ("learning_rate", lit(0.001)), ("steps", Param(0)),
         ("schedule", lit("cosine"))))
    assert parse("MINIMIZE loss WRT (W)") == Minimize("loss", ("W",))


# ---------------------------------------------------------------- queries


def test_matmul_query():
    body = select_of("SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i "
                     "GROUP BY A.i, B.j")
    assert body == Select(
        (SelectItem(col("A", "i")), SelectItem(col("B", "j")),
         SelectItem(FuncCall("SUM", (FuncCall("MATMUL", (col("A", "v"), col("B", "v"))),)), "v")),
        (JoinRef("INNER", TableRef("A"), TableRef("B"), BinaryOp("=", col("A", "j"), col("B", "i"))),),
        group_by=(col("A", "i"), col("B", "j")))


def test_select_items_stars_and_aliases():
    body = select_of("SELECT DISTINCT *, A.*, x y, x AS z FROM A")
    assert body.distinct
    assert body.items == (SelectItem(Star(None)), SelectItem(Star("A")), SelectItem(col("x"), "y"),
                          SelectItem(col("x"), "z"))
    assert select_of("SELECT 1").from_items == ()


def test_joins_are_left_associative():
    body = select_of("SELECT * FROM A a LEFT JOIN B ON a.i = B.i RIGHT OUTER JOIN C ON C.i = a.i "
                     "FULL OUTER JOIN D ON D.i = a.i CROSS JOIN E INNER JOIN F ON TRUE, G")
    cross, g = body.from_items
    assert g == TableRef("G")
    kinds = []
    while isinstance(cross, JoinRef):
        kinds.append(cross.kind)
        cross = cross.left
    assert kinds == ["INNER", "CROSS", "FULL", "RIGHT", "LEFT"] and cross == TableRef("A", "a")


def test_special_from_items():
    body = select_of("SELECT * FROM EINSUM('ij,jk->ik', A, B AS b) AS C, GRAD(loss, W) G, "
                     "RETILE(A, (128, 64)) R, (SELECT 1 AS x) AS s, (SELECT 2) t, RETILE(B, (8))")
    assert body.from_items == (
        EinsumRef("ij,jk->ik", (TableRef("A"), TableRef("B", "b")), "C"),
        GradRef("loss", "W", "G"),
        RetileRef(TableRef("A"), (128, 64), "R"),
        SubqueryRef(Query(Select((SelectItem(lit(1), "x"),))), "s"),
        SubqueryRef(Query(Select((SelectItem(lit(2)),))), "t"),
        RetileRef(TableRef("B"), (8,)),
    )


def test_with_union_order_limit_offset():
    query = parse("WITH a AS (SELECT 1 AS x), b AS (SELECT 2 AS x) "
                  "SELECT x FROM a UNION ALL SELECT x FROM b UNION SELECT 3 "
                  "ORDER BY x DESC, 1 ASC LIMIT 10 OFFSET ?").query
    assert [cte.name for cte in query.ctes] == ["a", "b"] and isinstance(query.ctes[0], Cte)
    assert isinstance(query.body, SetOp) and not query.body.all
    assert isinstance(query.body.left, SetOp) and query.body.left.all
    assert query.order_by == (OrderItem(col("x"), True, nulls_first=True), OrderItem(lit(1), False))
    assert query.limit == lit(10) and query.offset == Param(0)


def test_parenthesised_union_operands():
    query = parse("(SELECT 1) UNION ALL (SELECT 2 ORDER BY 1 LIMIT 1) ORDER BY 1").query
    assert query.body.left == Select((SelectItem(lit(1)),))
    assert isinstance(query.body.right, Query) and query.body.right.limit == lit(1)
    assert parse("((SELECT 1))").query == Query(Select((SelectItem(lit(1)),)))
    assert parse("(SELECT 1 LIMIT 2)").query.limit == lit(2)


def test_keywords_still_work_as_names():
    body = select_of('SELECT value, key, i, j, k, v, shape, tile, count FROM t AS data '
                     'WHERE t.value > 0')
    assert [item.expr.name for item in body.items] == [
        "value", "key", "i", "j", "k", "v", "shape", "tile", "count"]
    assert body.from_items == (TableRef("t", "data"),)
    assert parse("CREATE TENSOR x (value, key) SHAPE (2, 2) TILE (1, 1)").keys == ("value", "key")


def test_reserved_words_are_never_names():
    assert [i.expr.name for i in select_of("SELECT end, start, work FROM t").items] == [
        "end", "start", "work"]
    for text in ("SELECT a FROM t where", "SELECT from FROM t", "SELECT a AS select FROM t"):
        with pytest.raises(ParseError):
            parse(text)


def test_unicode_identifiers():
    assert select_of("SELECT größe FROM données").from_items == (TableRef("données"),)


def test_quoted_identifiers_keep_case_and_unquoted_keep_spelling():
    body = select_of('SELECT "Select", "a""b", MyCol FROM "My Tensor"')
    assert [item.expr.name for item in body.items] == ["Select", 'a"b', "MyCol"]
    assert body.from_items == (TableRef("My Tensor"),)


def test_comments_are_ignored():
    assert parse("SELECT /* a; b */ 1 -- one\n + 2 -- two") == parse("SELECT 1 + 2")


# ---------------------------------------------------------------- expressions


@pytest.mark.parametrize("text, expected", [
    ("1 + 2 * 3", BinaryOp("+", lit(1), BinaryOp("*", lit(2), lit(3)))),
    ("(1 + 2) * 3", BinaryOp("*", BinaryOp("+", lit(1), lit(2)), lit(3))),
    ("a - b - c", BinaryOp("-", BinaryOp("-", col("a"), col("b")), col("c"))),
    ("a // 2 % 3", BinaryOp("%", BinaryOp("//", col("a"), lit(2)), lit(3))),
    ("-a * b", BinaryOp("*", UnaryOp("-", col("a")), col("b"))),
    ("- -a", UnaryOp("-", UnaryOp("-", col("a")))),
    ("+a", UnaryOp("+", col("a"))),
    ("a OR b AND c", BinaryOp("OR", col("a"), BinaryOp("AND", col("b"), col("c")))),
    ("NOT a = 1 AND b", BinaryOp("AND", UnaryOp("NOT", BinaryOp("=", col("a"), lit(1))), col("b"))),
    ("a + 1 <= b * 2", BinaryOp("<=", BinaryOp("+", col("a"), lit(1)), BinaryOp("*", col("b"), lit(2)))),
    ("a != b", BinaryOp("<>", col("a"), col("b"))),
    ("x BETWEEN 1 AND 2 AND y", BinaryOp("AND", Between(col("x"), lit(1), lit(2)), col("y"))),
    ("x NOT BETWEEN a + 1 AND 9", Between(col("x"), BinaryOp("+", col("a"), lit(1)), lit(9), True)),
    ("A.i IN (1, 2)", InList(col("A", "i"), (lit(1), lit(2)))),
    ("i NOT IN (3)", InList(col("i"), (lit(3),), True)),
    ("k IS NULL OR k IS NOT NULL", BinaryOp("OR", IsNull(col("k")), IsNull(col("k"), True))),
])
def test_precedence(text, expected):
    assert parse_expression(text) == expected


@pytest.mark.parametrize("text, value", [
    ("1", 1), ("1.5", 1.5), (".5", 0.5), ("1e-3", 0.001), ("2.", 2.0), ("1E3", 1000.0),
    ("'it''s'", "it's"), ("TRUE", True), ("false", False), ("NULL", None), ("-1.5", -1.5),
])
def test_literals(text, value):
    expr = parse_expression(text)
    assert expr == Literal(value) and type(expr.value) is type(value)


def test_function_calls_and_casts():
    assert parse_expression("count(*)") == FuncCall("COUNT", (), star=True)
    assert parse_expression("Count(DISTINCT A.i)") == FuncCall("COUNT", (col("A", "i"),),
                                                               distinct=True)
    assert parse_expression("einsum('ij->ji', A.v)") == FuncCall(
        "EINSUM", (lit("ij->ji"), col("A", "v")))
    assert parse_expression("now()") == FuncCall("NOW", ())
    assert parse_expression("CAST(A.v AS Float16)") == Cast(col("A", "v"), "float16")


def test_parameters_are_numbered_in_text_order_across_the_statement():
    statement = parse("WITH c AS (SELECT ? AS x) SELECT f(?, ?) FROM c "
                      "WHERE c.x IN (?, ?) AND ? < 1 LIMIT ?")
    query = statement.query
    assert query.ctes[0].query.body.items[0].expr == Param(0)
    assert query.body.items[0].expr.args == (Param(1), Param(2))
    in_list, less = query.body.where.left, query.body.where.right
    assert in_list.items == (Param(3), Param(4)) and less.left == Param(5)
    assert query.limit == Param(6)


# ---------------------------------------------------------------- spans


def test_spans_in_a_multi_line_statement():
    text = "SELECT A.i,\n       SUM(A.v) AS v\nFROM A\nWHERE A.j  =  ?\nGROUP BY A.i"
    query = parse(text).query
    total = query.body.items[1].expr
    assert total.span == Span(2, 8, 19, 27) and text[19:27] == "SUM(A.v)"
    assert total.args[0].span.line == 2 and total.args[0].span.column == 12
    where = query.body.where
    assert (where.span.line, where.span.column) == (4, 7)
    assert text[where.span.start:where.span.end] == "A.j  =  ?"
    assert where.right.span == Span(4, 15, 54, 55) and text[54] == "?"
    assert query.body.from_items[0].span == Span(3, 6, 38, 39)
    assert query.span.start == 0 and query.span.end == len(text)


def test_statement_and_clause_spans():
    text = "  UPDATE W\n  SET v = W.v * 2 ;"
    statement = parse(text)
    assert statement.span == Span(1, 3, 2, len(text) - 2)
    assert statement.assignments[0].span == Span(2, 7, 17, 28)
    assert parse_expression("(a + b)").span.start == 1  # parentheses are not part of the node


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("text, message, line, column", [
    ("SELECT a FROM t FROM u", 'syntax error at or near "FROM"', 1, 17),
    ("SELECT a FROM", "syntax error at end of input", 1, 14),
    ("SELECT a,\n  b FROM t WHERE a = = 1", 'syntax error at or near "="', 2, 22),
    ("SELECT a\nFROM t\nWHERE", "syntax error at end of input", 3, 6),
    ("SELECT $ FROM t", "unexpected character '$'", 1, 8),
    ("SELECT 'abc FROM t", "unterminated quoted string", 1, 8),
    ('SELECT "abc FROM t', "unterminated quoted identifier", 1, 8),
    ("SELECT 1 /* never closed", "unterminated /* comment", 1, 10),
    ("selection FROM t", 'syntax error at or near "selection"', 1, 1),
    ("CREATE TENSOR A SHAPE (2.5) TILE (1)", 'syntax error at or near "2.5"', 1, 24),
    ("", "syntax error at end of input", 1, 1),
])
def test_syntax_error_positions(text, message, line, column):
    with pytest.raises(ParseError) as caught:
        parse(text)
    error = caught.value
    assert (error.message, error.line, error.column) == (message, line, column)


def test_error_renders_caret_under_the_token():
    with pytest.raises(ParseError) as caught:
        parse("SELECT a\nFROM t WHERE a = = 1")
    assert str(caught.value).splitlines()[1:3] == [
        "LINE 2: FROM t WHERE a = = 1",
        "                         ^",
    ]


@pytest.mark.parametrize("text, hint", [
    ("SELEC a FROM t", "did you mean SELECT?"),
    ("SELECT a FROM", "expected (, EINSUM, GRAD, RETILE or a name"),
    ("DROP TENSOR IF", "expected EXISTS"),
    ("CREATE TENSOR A SHAPE (1) TILE (1) FILL ZERO", "did you mean ZEROS?"),
    ("SELECT 1; SELECT 2", "parse() takes one statement; split a script with split_statements()"),
    ("  -- nothing\n", "the statement is empty"),
])
def test_error_hints(text, hint):
    with pytest.raises(ParseError) as caught:
        parse(text)
    assert caught.value.hint == hint


@pytest.mark.parametrize("text, message", [
    ("CREATE TENSOR A SHAPE (1) TILE (1) FILL CONSTANT", "FILL CONSTANT takes 1 argument(s), got 0"),
    ("CREATE TENSOR A SHAPE (1) TILE (1) FILL RANDOM_NORMAL(1)", "FILL RANDOM_NORMAL takes 2 or 3 argument(s), got 1"),
    ("CREATE TENSOR A SHAPE (1) TILE (1) DTYPE f DTYPE g", "DTYPE is given twice"),
    ("SELECT SUM(*) FROM A", "SUM(*) is not allowed; only COUNT(*)"),
    ("SELECT * FROM A CROSS JOIN B ON A.i = B.i", "CROSS JOIN takes no ON condition"),
    ("CREATE TENSOR A FROM COO t (v) SHAPE (1) TILE (1)", "FROM COO needs index columns and a value column"),
    ('SELECT "" FROM t', "zero-length quoted identifier"),
])
def test_semantic_syntax_errors(text, message):
    with pytest.raises(ParseError) as caught:
        parse(text)
    assert caught.value.message == message


@pytest.mark.parametrize("text", [
    "SELECT", "SELECT * FROM A JOIN", "INSERT INTO A VALUES", "CREATE TENSOR A", "UPDATE W SET",
    "SELECT (1", "SELECT 1)", "SELECT a b c", "MINIMIZE loss WRT W", "SET x", "SELECT a.b.c",
    "SELECT 1 +", "SELECT f(,)", "SELECT * FROM GRAD(loss)", "DROP TABLE", "SHOW", "@",
])
def test_every_bad_statement_raises_parse_error(text):
    with pytest.raises(ParseError):
        parse(text)


def test_deep_nesting_raises_parse_error_not_recursion_error():
    with pytest.raises(ParseError):
        parse("SELECT " + "NOT " * 5000 + "x")
    assert parse("SELECT " + "(" * 5000 + "1" + ")" * 5000)  # parentheses add no depth


def test_parse_is_fast_after_warm_up():
    text = ("SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i "
            "GROUP BY A.i, B.j")
    parse(text)
    best = min(_timed(parse, text) for _ in range(20))
    assert best < 0.005  # typically ~0.4 ms; the bound only catches a grammar gone quadratic


def _timed(function, argument) -> float:
    start = time.perf_counter()
    function(argument)
    return time.perf_counter() - start


@pytest.mark.parametrize("where", [0, 500, 999])
def test_a_long_line_is_shown_as_a_window_around_the_fault_as_psql_does(where):
    terms = ["A.v"] * 1000
    terms[where] = "A.v !"
    with pytest.raises(ParseError) as failed:
        parse("SELECT " + " + ".join(terms) + " FROM A")
    _message, line, caret = str(failed.value).splitlines()[:3]
    assert len(line) < 100
    assert line[caret.index("^")] == "!"
    assert line.startswith("LINE 1: ...") == (where > 0)
    assert line.endswith("...") == (where < 990)


def test_a_short_line_is_shown_whole():
    with pytest.raises(ParseError) as failed:
        parse("SELECT 1 FROM A WHERE x ==== 3")
    assert str(failed.value).splitlines()[1:3] == ["LINE 1: SELECT 1 FROM A WHERE x ==== 3",
                                                   "                                 ^"]


def test_order_by_nulls_first_or_last():
    query = parse("SELECT x FROM a ORDER BY x DESC NULLS LAST, y NULLS FIRST, z ASC, w desc").query
    assert [(item.descending, item.nulls_first) for item in query.order_by] == \
        [(True, False), (False, True), (False, False), (True, True)]


def test_having_after_group_by():
    select = parse("SELECT a.i, COUNT(*) AS n FROM a GROUP BY a.i HAVING COUNT(*) > 1").query.body
    assert select.having is not None and len(select.group_by) == 1
