"""sqlite3's named placeholders (`:name`, bound from a mapping) as the `$name` ones trdb and DuckDB read."""
from __future__ import annotations

import re
from typing import Any, Mapping

from trdb import errors

# What a colon may stand in: texts and comments are skipped whole (unterminated ones to the end), `::` is a
# cast, a subscript's colon a slice (`l[lo:hi]`, `l[:n]`). A placeholder's colon follows no operand: `x: 1` is
# DuckDB's prefix alias, `'a': 1` a struct's key, `n:=1` a named argument.
_TOKENS = re.compile(r"""
    (?P<skip> [eE]'(?:[^'\\]|\\.|'')*+'?          # E'...' with backslash escapes
            | '[^']*+(?:''[^']*+)*+'?              # '...'
            | "[^"]*+(?:""[^"]*+)*+"?              # "identifier"
            | \$(?P<tag>(?:[^\W\d]\w*)?)\$.*?(?:\$(?P=tag)\$|\Z)   # $$...$$, $tag$...$tag$
            | --[^\n]* | /\*.*?(?:\*/|\Z) )
  | (?P<cast>::)
  | (?P<open>\[) | (?P<close>\])
  | (?<![\w)\]'"]) :(?P<name>[^\W\d]\w*)
""", re.S | re.X)


def colon_placeholders(text: str, values: Mapping[str, Any]) -> str:
    """`text` with each `:name` placeholder written `$name` (same length: positions in errors stay right).
    A name that `values` lacks is a ProgrammingError with a caret under it. Inside a subscript a colon is
    a slice (`l[:n]` reads the column n, as in DuckDB): a placeholder there is written `$name`."""
    if ":" not in text:
        return text
    given = {str(key).lower() for key in values}
    brackets: list[bool] = []  # for each open bracket: whether it is a subscript
    starts = []
    for token in _TOKENS.finditer(text):
        if token.group("open"):
            brackets.append(_after_operand(text, token.start()))
        elif token.group("close"):
            brackets = brackets[:-1]
        elif token.group("name") and not (brackets and brackets[-1]):
            if token.group("name").lower() not in given:
                raise _missing(text, token.start(), token.group("name"), given)
            starts.append(token.start())
    if not starts:
        return text
    chars = list(text)
    for start in starts:
        chars[start] = "$"
    return "".join(chars)


# words after which a `[` opens a list (`SELECT [:a, :b]`, `ARRAY[:a]`), where after any other name it is a subscript
_BEFORE_A_VALUE = frozenset("""SELECT WHERE AND OR NOT IN IS THEN ELSE WHEN CASE BY ON VALUES LIKE ILIKE HAVING
    RETURNING SET LIMIT OFFSET DISTINCT ALL ANY SOME BETWEEN QUALIFY ARRAY LIST""".split())
_LAST_WORD = re.compile(r"\w+\Z")


def _after_operand(text: str, offset: int) -> bool:
    """Whether the text before `offset` ends with an operand (a name, `)`, `]`, a quote): a `[` there opens
    a subscript; after a keyword, an operator or a comma it opens a list."""
    before = text[max(0, offset - 64):offset].rstrip()
    if not before or before[-1] in ")]'\"":
        return bool(before)
    word = _LAST_WORD.search(before)
    return word is not None and word.group().upper() not in _BEFORE_A_VALUE


def _missing(text: str, offset: int, name: str, given: set[str]) -> errors.ProgrammingError:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    close = errors.suggest(name, given)
    hint = f"did you mean :{close}?" if close else (
        f"the mapping has {', '.join(sorted(given))}" if given else "the mapping of parameters is empty")
    return errors.ProgrammingError(f"no value for the named parameter :{name}", hint=hint, statement=text,
                                   line=line, column=column)
