"""DuckDB's exceptions as trdb's errors, classed by what went wrong (a conflict, memory, a full disk, a temp
directory gone, a fatal error that stopped the database), each with a hint."""
from __future__ import annotations

from typing import Optional

import duckdb

from trdb import errors

_ERROR_MAP = (
    (duckdb.ParserException, errors.ProgrammingError),
    (duckdb.CatalogException, errors.ProgrammingError),
    (duckdb.BinderException, errors.ProgrammingError),
    (duckdb.ConstraintException, errors.IntegrityError),
    (duckdb.ConversionException, errors.DataError),
    (duckdb.OutOfRangeException, errors.DataError),
    (duckdb.InvalidInputException, errors.ProgrammingError),
    (duckdb.TransactionException, errors.OperationalError),
    (duckdb.IOException, errors.OperationalError),
    (duckdb.InterruptException, errors.QueryCancelled),
    (duckdb.NotImplementedException, errors.NotSupportedError),
    (duckdb.InternalException, errors.InternalError),
    (duckdb.Error, errors.DatabaseError),
)
# DuckDB's words for a buffer it could not get: at commit they come inside a TransactionException
_MEMORY_WORDS = ("out of memory", "could not allocate block", "failed to pin block", "failed to allocate")
# two transactions wrote the same rows (or the same key: a unique index found it at the second commit)
_CONFLICT_WORDS = ("conflict", "constraint violation")
_KEPT = "committed data is intact"


def translate(exc: duckdb.Error, temp_directory: Optional[str] = None) -> errors.Error:
    """A DuckDB exception as the matching PEP 249 class of trdb, message kept. `temp_directory`: where
    DuckDB spills, so that an I/O error there is told apart from one on the database file."""
    text = str(exc)
    lowered = text.lower()
    if "no space left on device" in lowered:
        return _disk_full(text, temp_directory)
    if temp_directory and temp_directory in text and isinstance(exc, (duckdb.IOException, duckdb.FatalException)):
        return errors.OperationalError(f"temp_directory {temp_directory!r} could not be used (removed, or not "
                                       f"writable): {text}", hint=f"SET temp_directory to a writable directory; {_KEPT}")
    if "max_temp_directory_size" in lowered:
        return errors.OperationalError(f"DuckDB's temp_directory is full: {text}",
                                       hint="free disk space under temp_directory, SET temp_directory to a disk "
                                            "with room, or raise memory_limit so that less is spilled")
    if isinstance(exc, getattr(duckdb, "OutOfMemoryException", ())) or any(w in lowered for w in _MEMORY_WORDS):
        return errors.OperationalError(f"DuckDB ran out of the memory trdb gives it: {text}",
                                       hint="raise memory_limit (DuckDB gets a quarter of it, at least 32 MB), or "
                                            "store the tensor in smaller tiles")
    if isinstance(exc, duckdb.InterruptException):  # a cancel (Cursor.close(), Ctrl-C) that DuckDB took
        return errors.QueryCancelled("the statement was cancelled")
    if isinstance(exc, duckdb.TransactionException):
        return _transaction_error(text, lowered)
    if "read-only mode" in text:
        return errors.OperationalError("the database is open read-only: the statement would change it",
                                       hint="connect without read_only=True while no other process has it open")
    for duck_class, trdb_class in _ERROR_MAP:
        if isinstance(exc, duck_class):
            return trdb_class(text)
    return errors.DatabaseError(text)


def is_fatal(exc: duckdb.Error) -> bool:
    """Whether DuckDB invalidated its database: every later call fails until it is opened again."""
    return isinstance(exc, duckdb.FatalException) or "database has been invalidated" in str(exc)


def _disk_full(text: str, temp_directory: Optional[str]) -> errors.Error:
    where = "temp_directory's disk" if temp_directory and temp_directory in text else "the disk"
    return errors.OperationalError(f"{where} is full: {text}",
                                   hint=f"free disk space there and run the statement again; {_KEPT}")


def _transaction_error(text: str, lowered: str) -> errors.Error:
    if any(word in lowered for word in _CONFLICT_WORDS):
        return errors.TransactionConflict(
            f"could not serialize access: another connection changed the same data ({text})",
            hint="the transaction was rolled back; run it again")
    if "failed to commit" in lowered:  # an I/O error while committing is no conflict: nothing to run again
        return errors.OperationalError(f"the commit failed: {text}", hint=f"the transaction was rolled back; {_KEPT}")
    return errors.OperationalError(text)
