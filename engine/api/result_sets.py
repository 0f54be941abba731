"""PEP 249's one rule for a statement without a result set, applied to DuckDB's row counts too."""
from __future__ import annotations

import re

from trdb.execution.result import Result
from trdb.parser import split_statements

# the first word of a statement, after comments: a write whose result DuckDB (and trdb's COPY) make a count row
_FIRST_WORD = re.compile(r"(?:\s+|--[^\n]*|/\*.*?\*/)*(\w+)", re.S)
_WRITES = {"INSERT", "UPDATE", "DELETE", "MERGE", "COPY", "CREATE"}
# RETURNING makes a write a query: its rows are a result set, whatever its columns are named
_RETURNING = re.compile(r"\bRETURNING\b", re.I)


def is_row_count(result: Result, text: str) -> bool:
    """Whether `result` is the one-row `Count` of the rows (or tiles) that the last statement of `text`
    wrote: an INSERT, UPDATE, DELETE or MERGE, a CREATE TABLE ... AS, a COPY."""
    if result.schema is not None or not isinstance(result.rows, list) or len(result.rows) != 1:
        return False
    if [d[0] for d in result.description or ()] != ["Count"] or _RETURNING.search(text):
        return False
    return _last_first_word(text) in _WRITES


def _last_first_word(text: str) -> str:
    """The verb of the last statement of `text`; for `WITH ... INSERT` the verb after its common table expressions."""
    pieces = split_statements(text)
    first = _FIRST_WORD.match(pieces[-1].text) if pieces else None
    word = first.group(1).upper() if first else ""
    return _verb_after_ctes(pieces[-1].text[first.end():]) if word == "WITH" else word


# what the outermost level of a WITH statement holds: quoted text, comments, parentheses and words
_TOKENS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/|[()]|\w+", re.S)
_MAIN_VERBS = {"SELECT", "VALUES", "FROM", "TABLE"} | _WRITES


def _verb_after_ctes(text: str) -> str:
    """The first statement verb at the outermost level of `text` (after WITH's name AS (...) list)."""
    depth = 0
    for token in _TOKENS.findall(text):
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        elif depth == 0 and token.upper() in _MAIN_VERBS:
            return token.upper()
    return "WITH"


def without_row_count(result: Result, text: str) -> Result:
    """The result as PEP 249 has it: a statement that writes rows produces no result set (fetch* raises
    InterfaceError, description is None) and its count is the rowcount, as for trdb's own INSERT into a
    tensor; every other result is unchanged."""
    if not is_row_count(result, text):
        return result
    count = int(result.rows[0][0])
    # trdb's COPY sets no status of its own: the shell says what it wrote as it says DuckDB's counts
    status = result.status or f"{_last_first_word(text)}: {count} row" + ("" if count == 1 else "s")
    result.close()
    return Result(rowcount=count, status=status)
