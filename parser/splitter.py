"""Split a script into statements on `;`, minding quotes and comments, for batch files and the shell."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

# One lexical piece of a script, by DuckDB's lexical rules (PostgreSQL's): what DuckDB reads as one
# statement is one here. Unterminated strings, identifiers and block comments run to
# the end of the text (the parser reports them); the `closed` group tells whether they ended.
# E'...' strings take backslash escapes; $$...$$ and $tag$...$tag$ quote anything; a word may hold `$`
# (a$$b is a name, not a quote); block comments nest (_pieces finds where a nested one ends).
# Space includes the invisible characters DuckDB skips (BOM, zero-width space, Mongolian vowel separator).
# Quoted texts and comments are unrolled, possessive loops (`*+`): a repeated group that may backtrack
# (`(?:[^']|'')*`) costs Python's regex engine ~100 bytes per character of a long literal.
PIECE = re.compile(r"""
    (?P<quoted> [eE]'[^'\\]*(?:(?:\\.|'')[^'\\]*)*+(?P<q3>')?
              | '[^']*(?:''[^']*)*+(?P<q1>')? | "[^"]*(?:""[^"]*)*+(?P<q2>")?
              | \$(?P<tag>(?:[^\W\d]\w*)?)\$[^$]*(?:\$(?!(?P=tag)\$)[^$]*)*+(?P<q4>\$(?P=tag)\$)? )
  | (?P<comment> --[^\n]* | /\*[^*]*(?:\*+[^*/][^*]*)*+(?:\*+(?P<c>/)|\*+\Z|\Z) )
  | (?P<semicolon> ; )
  | (?P<space> [\s\u180e\u200b\ufeff]+ )
  | (?P<other> [\w$]+ | [^'"\-/;\s\u180e\u200b\ufeff\w$]+ | . )
""", re.VERBOSE | re.DOTALL)


@dataclass(frozen=True)
class StatementText:
    """One statement of a script, without its `;` and without comments or white space around it.

    line and column (1-based) and offset (0-based) say where text starts in the script.
    """

    text: str
    line: int
    offset: int
    column: int = 1


def _pieces(script: str):
    """Yield (kind, start, end, closed) for each lexical piece of the script."""
    start = 0
    while start < len(script):
        match = PIECE.match(script, start)
        kind, end = match.lastgroup, match.end()  # lastgroup: the outer group, it closes after the inner ones
        if kind == "comment" and script.find("/*", start + 2, end) >= 0:
            end, closed = _nested_comment_end(script, start)
        else:
            closed = kind not in ("quoted", "comment") or _is_closed(match)
        yield kind, start, end, closed
        start = end


def _is_closed(match: re.Match) -> bool:
    if match.group("quoted"):
        return any(match.group(name) for name in ("q1", "q2", "q3", "q4"))
    return not match.group("comment").startswith("/*") or bool(match.group("c"))


_COMMENT_MARK = re.compile(r"/\*|\*/")


def _nested_comment_end(script: str, start: int) -> tuple[int, bool]:
    """Where the block comment opening at `start` ends, counting the comments nested in it, and whether it closed."""
    depth = 0
    for mark in _COMMENT_MARK.finditer(script, start):
        depth += 1 if mark.group() == "/*" else -1
        if depth == 0:
            return mark.end(), True
    return len(script), False


def split_statements(script: str) -> list[StatementText]:
    """The statements of a script, in order; pieces holding only white space and comments are dropped."""
    if len(script) > _CACHED_TEXT:  # a long script (literal data) is rarely run again: kept, it would hold memory
        return list(_split.__wrapped__(script))
    return list(_split(script))


_CACHED_TEXT = 16 << 10  # characters


@functools.lru_cache(maxsize=256)
def _split(script: str) -> tuple[StatementText, ...]:
    # a program runs the same few statement texts over and over: each is split once
    statements, first, last = [], None, None
    for kind, start, end, _closed in _pieces(script):
        if kind == "semicolon":
            if first is not None:
                statements.append(_statement(script, first, last))
            first = last = None
        elif kind not in ("space", "comment"):
            first = start if first is None else first
            last = end
    if first is not None:
        statements.append(_statement(script, first, last))
    return tuple(statements)


def _statement(script: str, start: int, end: int) -> StatementText:
    line = script.count("\n", 0, start) + 1
    column = start - (script.rfind("\n", 0, start) + 1) + 1
    return StatementText(script[start:end], line, start, column)


def nests_deeper_than(text: str, limit: int) -> bool:
    """Whether parentheses nest more than `limit` deep in text, outside strings, quoted names and comments."""
    if text.count("(") <= limit:  # the common case, without lexing a long text
        return False
    depth = 0
    for kind, start, end, _closed in _pieces(text):
        if kind != "other" or "(" not in text[start:end] and ")" not in text[start:end]:
            continue
        for char in text[start:end]:
            depth += (char == "(") - (char == ")")
            if depth > limit:
                return True
    return False


def is_complete(text: str) -> bool:
    """True when text ends with a `;` outside strings and comments (what follows it is only
    white space or closed comments): a shell can then run what was typed."""
    complete = False
    for kind, _start, _end, closed in _pieces(text):
        if kind == "semicolon":
            complete = True
        elif kind != "space" and not (kind == "comment" and closed):
            complete = False
    return complete
