"""Splitter tests: statements of a script and whether shell input is complete."""
from __future__ import annotations

import pytest

from trdb.parser import StatementText, is_complete, parse, split_statements


def texts(script):
    return [statement.text for statement in split_statements(script)]


def test_splits_on_semicolons_and_drops_empty_statements():
    assert texts("SELECT 1; SELECT 2;;  ;\n SELECT 3") == ["SELECT 1", "SELECT 2", "SELECT 3"]
    assert texts("") == [] and texts(" ;\n; ") == []


def test_semicolons_inside_strings_identifiers_and_comments_do_not_split():
    script = """SELECT 'a;b''c;' AS "x;""y" FROM t -- not here; nor here
    WHERE /* ; */ a = 1; SELECT 2"""
    assert texts(script) == [
        """SELECT 'a;b''c;' AS "x;""y" FROM t -- not here; nor here\n    WHERE /* ; */ a = 1""",
        "SELECT 2",
    ]


def test_comment_only_pieces_are_dropped_and_surrounding_comments_trimmed():
    script = "-- header; with a semicolon\n/* block ; */\nSELECT 1 -- trailing\n;\n-- end;\n"
    assert texts(script) == ["SELECT 1"]


def test_positions_of_statements():
    script = "-- intro\nSELECT 1;  SELECT\n  2;\n\n  DESCRIBE A"
    assert split_statements(script) == [
        StatementText("SELECT 1", 2, 9, 1),
        StatementText("SELECT\n  2", 2, 20, 12),
        StatementText("DESCRIBE A", 5, 35, 3),
    ]
    for statement in split_statements(script):
        assert script[statement.offset:].startswith(statement.text)


def test_minus_and_slash_are_not_comments():
    assert texts("SELECT 4 - 2 / 1; SELECT a-b") == ["SELECT 4 - 2 / 1", "SELECT a-b"]


def test_unterminated_string_or_comment_runs_to_the_end():
    assert texts("SELECT 1; SELECT 'open; SELECT 2") == ["SELECT 1", "SELECT 'open; SELECT 2"]
    assert texts("SELECT 1 /* open; SELECT 2") == ["SELECT 1"]


def test_split_statements_parse():
    script = """CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL ONES;
    CREATE VIEW loss AS SELECT SUMSQ(A.v) AS v FROM A;  -- the loss
    MINIMIZE loss WRT (A) WITH (steps = 3);"""
    kinds = [type(parse(s.text)).__name__ for s in split_statements(script)]
    assert kinds == ["CreateTensor", "CreateView", "Minimize"]


@pytest.mark.parametrize("text, complete", [
    ("SELECT 1;", True),
    ("SELECT 1;  \n", True),
    ("SELECT 1; -- done", True),
    ("SELECT 1; /* done */", True),
    (";", True),
    ("SELECT 1; SELECT 2;", True),
    ("SELECT 1", False),
    ("", False),
    ("   \n", False),
    ("SELECT 1; SELECT 2", False),
    ("SELECT ';'", False),
    ("SELECT ';", False),
    ('SELECT ";"', False),
    ("SELECT 1 -- ;", False),
    ("SELECT 1 /* ; */", False),
    ("SELECT 1 /* ;", False),
    ("SELECT 1; /* open", False),
    ("SELECT 'it''s';", True),
])
def test_is_complete(text, complete):
    assert is_complete(text) is complete
