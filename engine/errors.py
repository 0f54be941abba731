"""The one exception hierarchy of trdb: PEP 249 classes at the root, user errors rendered with a caret."""
from __future__ import annotations

import difflib
from typing import Iterable, Optional

from trdb.parser.errors import render_caret


class Warning(Exception):  # noqa: A001 - the name is fixed by PEP 249
    """PEP 249 Warning."""


class Error(Exception):
    """PEP 249 Error: a message, optionally the statement with a caret under the fault and a hint."""

    def __init__(self, message: str, *, hint: Optional[str] = None, statement: Optional[str] = None,
                 line: Optional[int] = None, column: Optional[int] = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.statement = statement
        self.line = line
        self.column = column

    def at(self, statement: str, line: Optional[int], column: Optional[int]) -> "Error":
        """Attach the statement text and position unless the error already has them."""
        if self.statement is None:
            self.statement, self.line, self.column = statement, line, column
        return self

    def __str__(self) -> str:
        parts = [self.message]
        if self.statement is not None and self.line:
            parts.append(render_caret(self.statement, self.line, self.column or 1))
        if self.hint:
            parts.append(f"HINT: {self.hint}")
        return "\n".join(parts)


class InterfaceError(Error):
    """Misuse of the API itself (a closed cursor, a fetch without a result)."""


class DatabaseError(Error):
    """Errors about the database and its data."""


class DataError(DatabaseError):
    """Bad data: values out of range, tile shapes that do not fit at run time, bad files."""


class OperationalError(DatabaseError):
    """The database could not do what was asked: aborted transactions, cancelled queries, I/O."""


class IntegrityError(DatabaseError):
    """A key that already exists, a relation that already exists."""


class InternalError(DatabaseError):
    """A broken invariant inside trdb: a bug, never a user error."""


class ProgrammingError(DatabaseError):
    """Errors in the statement: syntax, unknown names, type and shape mismatches, parameter counts."""


class NotSupportedError(DatabaseError):
    """A feature that trdb does not (yet) provide."""


class TransactionConflict(OperationalError):
    """Another connection changed the same data first: this transaction was rolled back."""


class StaleSnapshot(TransactionConflict):
    """A statement outside a transaction read tiles while another connection committed; it runs again."""


class QueryCancelled(OperationalError):
    """The statement was cancelled (Ctrl-C, Cursor.close() while running)."""


def out_of_memory(exc: MemoryError, hint: Optional[str] = None) -> OperationalError:
    """The error a user gets for a host allocation the process could not make (one tile or value too large for
    what the machine, or the process's limits, can give now; the buffer pool and operators spill before that)."""
    return OperationalError(f"out of memory: {exc}",
                            hint=hint or "one tile or value needs this much at once: store the tensor in smaller "
                                         "tiles (TILE ...), or run where more memory is free")


def suggest(name: str, candidates: Iterable[str]) -> Optional[str]:
    """The closest candidate to `name` (names are case-insensitive), or None when nothing is close."""
    by_fold = {c.lower(): c for c in candidates}
    matches = difflib.get_close_matches(name.lower(), list(by_fold), n=1, cutoff=0.5)
    return by_fold[matches[0]] if matches else None


def did_you_mean(name: str, candidates: Iterable[str]) -> Optional[str]:
    """The hint of an unknown name: the closest known one."""
    close = suggest(name, candidates)
    return f'did you mean "{close}"?' if close else None
