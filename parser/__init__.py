"""trql text -> AST."""
from __future__ import annotations

import difflib
import functools
import re
from pathlib import Path

from lark import Lark, Token
from lark.exceptions import UnexpectedCharacters, UnexpectedInput

from . import ast
from .builder import Builder
from .errors import ParseError
from .splitter import StatementText, is_complete, nests_deeper_than, split_statements
from .table_cache import cached_lark

__all__ = ["parse", "parse_expression", "split_statements", "is_complete", "nests_deeper_than", "StatementText",
           "ParseError", "ast"]

# How the expected-token hint names terminals that are patterns rather than fixed words.
TERMINAL_WORDS = {"NAME": "a name", "INT": "an integer",
                  "FLOAT": "a number", "STRING": "a string", "PARAM": "?",
                  "$END": "end of input"}
UNTERMINATED = {"'": "unterminated quoted string", '"': "unterminated quoted identifier"}


# Words that are never names, as in PostgreSQL: `SELECT a FROM t FROM u` fails at the second
# FROM instead of taking it for an alias. Other keywords stay usable as names where unambiguous.
RESERVED = frozenset("""
    SELECT FROM WHERE GROUP ORDER BY LIMIT OFFSET UNION JOIN ON AND OR NOT AS IN IS BETWEEN NULL
    TRUE FALSE DISTINCT ALL CAST WITH INNER LEFT RIGHT FULL OUTER CROSS ASC DESC CREATE INSERT
    INTO VALUES UPDATE SET DELETE DROP""".split())


class _PostLexer:
    """Lark post-lexer. always_accept makes every lexer state know the word-like terminals, so
    that `selection` lexes as one name and never as SELECT followed by `ion`; process() turns a
    reserved word that lexed as a name back into its keyword, which the parser then rejects."""

    always_accept = ("NAME", "INT", "FLOAT", "STRING", "UNCLOSED_COMMENT")

    def process(self, stream):
        for token in stream:
            if token.type == "NAME" and token.upper() in RESERVED:
                token = Token.new_borrow_pos(token.upper(), token, token)
            yield token


@functools.cache
def _lark() -> Lark:
    """The LALR parser, made once on first use: its tables loaded from the user's cache (about 0.02 s), or
    built from the grammar (about 0.15 s) and stored there (table_cache.py)."""
    grammar = Path(__file__).with_name("trql.lark").read_text()
    options = dict(parser="lalr", lexer="contextual", propagate_positions=True, maybe_placeholders=True,
                   postlex=_PostLexer(), start=["single_statement", "single_expression"])
    lark = cached_lark(grammar, options, lambda: Lark(grammar, **options))
    _pass_unit_rules_through(lark)
    return lark


def _pass_unit_rules_through(lark: Lark) -> None:
    """Reduce `?a: b` rules by handing b up untouched. Lark would wrap the reduction in its
    position bookkeeping, which leaves b's positions as they are but costs ~15% of a parse (an
    expression operand climbs six such rules). Skipped if lark's internals are not as expected."""
    callbacks = getattr(getattr(getattr(lark.parser, "parser", None), "parser", None),
                        "callbacks", None)
    if not isinstance(callbacks, dict):
        return
    for rule in callbacks:
        single = len(rule.expansion) == 1 and not rule.expansion[0].is_term
        if single and rule.options.expand1 and not rule.alias:
            callbacks[rule] = _first


def _first(children):
    return children[0]


def parse(text: str) -> ast.Statement:
    """Parse one statement (a trailing `;` is allowed); raise ParseError on bad syntax.

    Statements are immutable: a text seen recently (a view, bound by every query that reads it; a
    statement run in a loop) is parsed once. Long texts (literal data) are not kept."""
    if len(text) <= _CACHED_TEXT:
        return _parse_cached(text)
    return _parse(text, "single_statement")


_CACHED_TEXT = 4096  # characters: longer statement texts are parsed every time


@functools.lru_cache(maxsize=256)
def _parse_cached(text: str) -> ast.Statement:
    return _parse(text, "single_statement")


def parse_expression(text: str) -> ast.Expr:
    """Parse a lone expression such as `A.v * 2 + 1`; raise ParseError on bad syntax."""
    return _parse(text, "single_expression")


def _parse(text: str, start: str):
    try:
        tree = _lark().parse(text, start=start)
    except UnexpectedInput as error:
        raise _syntax_error(error, text) from None
    try:
        return Builder(text).build(tree)
    except RecursionError:
        raise ParseError("statement is nested too deeply", text, 1, 1) from None


def _syntax_error(error: UnexpectedInput, text: str) -> ParseError:
    """Translate a lark error into a PostgreSQL-style ParseError at the offending token."""
    if isinstance(error, UnexpectedCharacters):
        char = text[error.pos_in_stream]
        message = UNTERMINATED.get(char, f"unexpected character {char!r}")
        return ParseError(message, text, error.line, error.column)
    token = getattr(error, "token", None)
    if token is None or token.type == "$END":
        empty = not split_statements(text)
        # lark places $END on the last token; just after it is where the statement stopped
        at_last_token = token is not None and not empty
        line, column = (token.end_line, token.end_column) if at_last_token else _end_of_input(text)
        hint = "the statement is empty" if empty else _expected_hint(error, None)
        return ParseError("syntax error at end of input", text, line, column, hint)
    if token.type == "UNCLOSED_COMMENT":
        return ParseError("unterminated /* comment", text, token.line, token.column)
    hint = _expected_hint(error, str(token))
    if text[:token.start_pos].rstrip().endswith(";"):
        hint = "parse() takes one statement; split a script with split_statements()"
    unsupported = _unsupported(text[:token.start_pos], str(token))
    if unsupported is not None:
        message, hint = unsupported
        return ParseError(message, text, token.line, token.column, hint)
    return ParseError(f'syntax error at or near "{token}"', text, token.line, token.column, hint)


# SQL that trql does not have, told apart by what comes before the token the parser stopped at: (what the text
# before it ends with, the token, the message, the hint)
_UNSUPPORTED = (
    (re.compile(r"\b(IN|EXISTS)\s*\(\s*$", re.I), "SELECT", "a subquery in a condition is not supported",
     "join it in FROM instead: FROM A JOIN (SELECT ...) AS s ON A.i = s.i"),
    (re.compile(r"\bOVER\s*$", re.I), "(", "window functions (OVER) are not supported",
     "aggregate with GROUP BY in a subquery and join it back on the group keys"),
    (re.compile(r"\bCASE\s+WHEN\s*$", re.I), None, "CASE is not supported",
     "split the tuples with WHERE and UNION ALL, or mask a tensor: A.v * CAST(A.v > 0 AS float32)"),
    (re.compile(r"\)\s*FILTER\s*$", re.I), "(", "an aggregate's FILTER clause is not supported",
     "filter the tuples in WHERE (in a subquery where other aggregates need them all)"),
)


def _unsupported(before: str, token: str) -> "tuple[str, str] | None":
    """The message and hint for SQL that trql lacks, where the syntax error is where such SQL goes on."""
    for pattern, expected, message, hint in _UNSUPPORTED:
        if (expected is None or token.upper() == expected) and pattern.search(before):
            return message, hint
    return None


def _end_of_input(text: str) -> tuple[int, int]:
    """Line and column just after the last character that is not white space."""
    body = text.rstrip()
    line = body.count("\n") + 1
    return line, len(body) - (body.rfind("\n") + 1) + 1


def _expected_hint(error: UnexpectedInput, found: str | None) -> str | None:
    """`did you mean SELECT?` for a misspelt keyword, else the few expected tokens in words."""
    words = sorted({_describe(name) for name in _expected(error) if not name.islower()})
    keywords = [w for w in words if w.isalpha() and w.isupper()]
    typo = found is not None and len(found) >= 3 and found.isidentifier()
    close = difflib.get_close_matches(found.upper(), keywords, n=1, cutoff=0.75) if typo else []
    if close:
        return f"did you mean {close[0]}?"
    if not words or len(words) > 8:
        return None
    return "expected " + (words[0] if len(words) == 1 else
                          ", ".join(words[:-1]) + " or " + words[-1])


def _expected(error: UnexpectedInput) -> set[str]:
    """The terminals the parser would have accepted where it stopped."""
    state = getattr(error, "state", None)
    try:
        return set(state.parse_conf.states[state.position])
    except AttributeError:
        return set(getattr(error, "expected", None) or ())


def _describe(terminal: str) -> str:
    if terminal in TERMINAL_WORDS:
        return TERMINAL_WORDS[terminal]
    pattern = _lark().get_terminal(terminal).pattern
    return pattern.value.upper() if pattern.type == "str" else terminal
