"""The parser's tables in the user's cache: loaded tables parse (and fail) as built ones do; a file that is not
the user's alone, damaged, or unwritable is not trusted and the tables are built again."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from lark import Lark
from lark.exceptions import UnexpectedInput

import trdb.parser as trql
from trdb.parser.table_cache import cached_lark

QUERIES = Path(__file__).parent.parent.parent / "queries"
BAD = ["SELECT FROM A", "SELECT A.v FROM A WHERE", "CREATE TENSOR SHAPE (2)", "SELECT 'open", "MINIMIZE WRT (W)",
       "SELECT A.i, SUM(A.v) AS v FROM A GROUP", "UPDATE A SET = 1"]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("TRDB_PARSER_CACHE", str(folder))
    return folder


def _grammar_and_options():
    grammar = (Path(trql.__file__).with_name("trql.lark")).read_text()
    options = dict(parser="lalr", lexer="contextual", propagate_positions=True, maybe_placeholders=True,
                   postlex=trql._PostLexer(), start=["single_statement", "single_expression"])
    return grammar, options


def _made(builds: list):
    grammar, options = _grammar_and_options()

    def build():
        builds.append(1)
        return Lark(grammar, **options)
    return cached_lark(grammar, options, build)


def _statements() -> list[str]:
    texts = [statement.text for path in sorted(QUERIES.glob("*.sql"))
             for statement in trql.split_statements(path.read_text())]
    assert len(texts) > 100
    return texts


def _outcome(parser: Lark, text: str):
    try:
        tree = parser.parse(text, start="single_statement")
        return tree, [(node.meta.line, node.meta.column, node.meta.end_pos) for node in tree.iter_subtrees()
                      if not node.meta.empty]
    except UnexpectedInput as error:
        return type(error).__name__, error.line, error.column, sorted(getattr(error, "expected", ()) or ())


def test_loaded_tables_parse_and_fail_as_built_ones(folder):
    builds: list = []
    built = _made(builds)
    assert builds == [1] and len(list(folder.iterdir())) == 1
    loaded = _made(builds)
    assert builds == [1]  # from the file
    for text in _statements() + BAD:
        assert _outcome(loaded, text) == _outcome(built, text), text


def test_a_file_others_may_write_is_not_loaded(folder):
    builds: list = []
    _made(builds)
    (path,) = folder.iterdir()
    path.chmod(0o666)
    assert _outcome(_made(builds), "SELECT * FROM A")[0] is not None and builds == [1, 1]
    assert not path.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH)  # written again, by and for this user
    folder.chmod(0o777)
    _made(builds)
    assert builds == [1, 1, 1]  # a folder others may write: not trusted either


@pytest.mark.parametrize("content", [b"", b"garbage", b"\xff" * 1000, __import__("marshal").dumps(({}, {}))])
def test_a_damaged_file_is_built_again_and_replaced(folder, content):
    builds: list = []
    _made(builds)
    (path,) = folder.iterdir()
    path.write_bytes(content)
    parser = _made(builds)
    assert builds == [1, 1] and parser.parse("SELECT * FROM A", start="single_statement") is not None
    _made(builds)
    assert builds == [1, 1]  # the good tables were stored again


def test_off_or_unwritable_builds_every_time(tmp_path, monkeypatch):
    builds: list = []
    monkeypatch.setenv("TRDB_PARSER_CACHE", "off")
    _made(builds)
    _made(builds)
    assert builds == [1, 1]
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("TRDB_PARSER_CACHE", str(blocked / "cache"))
    _made(builds)
    assert builds == [1, 1, 1] and blocked.read_text() == "not a folder"


def test_the_parser_of_the_session_uses_the_cache(folder):
    trql._lark.__wrapped__()
    assert [path.suffix for path in folder.iterdir()] == [".marshal"]
    assert os.stat(folder).st_mode & 0o777 == 0o700


def test_no_home_folder_builds(monkeypatch):
    monkeypatch.delenv("TRDB_PARSER_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: (_ for _ in ()).throw(RuntimeError("no home"))))
    builds: list = []
    assert _made(builds).parse("SELECT * FROM A", start="single_statement") is not None and builds == [1]
