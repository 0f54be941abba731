"""The PEP 249 (DB-API 2.0) Connection and Cursor, with tensor extensions (fetch_tensor, fetch_arrow...)."""
from __future__ import annotations

import weakref
from typing import Any, Iterator, Optional, Sequence, Union

import numpy as np

from trdb import errors
from trdb.api.conversions import result_to_arrow, result_to_numpy, result_to_sparse
from trdb.config.settings import physical_memory
from trdb.execution.result import Result, assemble, check_result_fits
from trdb.execution.spool import RowSpool
from trdb.kernels.backend import to_host
from trdb.planner.types import Column


def _check_utf8(text: str) -> None:
    """Refuse a statement holding a lone surrogate: neither DuckDB nor a terminal can take it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        line = text.count("\n", 0, exc.start) + 1
        column = exc.start - (text.rfind("\n", 0, exc.start) + 1) + 1
        raise errors.ProgrammingError(
            f"the statement is not valid UTF-8 text: a lone surrogate U+{ord(text[exc.start]):04X} at line {line}, "
            f"column {column}", hint="decode the statement's bytes as UTF-8 (surrogates come from "
            "errors='surrogateescape' or broken UTF-16)") from None


class DBAPITypeObject:
    """A PEP 249 type object: equal to every type code of its group."""

    def __init__(self, *prefixes: str):
        self.prefixes = prefixes

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.upper().startswith(self.prefixes)

    def __hash__(self) -> int:
        return hash(self.prefixes)


STRING = DBAPITypeObject("VARCHAR", "STR", "TEXT")
BINARY = DBAPITypeObject("BLOB", "BYTES")
NUMBER = DBAPITypeObject("BIGINT", "INTEGER", "SMALLINT", "TINYINT", "HUGEINT", "DOUBLE", "FLOAT",
                         "REAL", "DECIMAL", "INT", "BOOL")
DATETIME = DBAPITypeObject("DATE", "TIME", "TIMESTAMP")
ROWID = DBAPITypeObject("ROWID")
TENSOR = DBAPITypeObject("TENSOR")


def _describe(column: Column) -> tuple:
    return (column.name, str(column.type), None, None, None, None, column.is_key)


CURSOR_BATCH_BYTES = 4 << 20  # a spilled result is read back about this many tile bytes at a time


class RowReader:
    """The rows of a result in order, from a list by slicing, from a spilled spool a bounded batch at a time."""

    def __init__(self, rows: Union[list, RowSpool]):
        self.rows = rows
        self.position = 0
        self._batches: Optional[Iterator[list]] = None
        self._pending: list = []

    def take(self, count: Optional[int]) -> list:
        if not isinstance(self.rows, RowSpool):
            end = len(self.rows) if count is None else min(len(self.rows), self.position + count)
            taken = self.rows[self.position:end]
        else:
            taken = self._take_spooled(len(self.rows) - self.position if count is None else count)
        self.position += len(taken)
        return taken

    def _take_spooled(self, count: int) -> list:
        if self._batches is None:
            self._batches = self.rows.batches(CURSOR_BATCH_BYTES)
        taken = []
        while len(taken) < count:
            if not self._pending:
                self._pending = next(self._batches, [])
                if not self._pending:
                    break
            part = self._pending[:count - len(taken)]
            self._pending = self._pending[len(part):]
            taken.extend(part)
        return taken

    def rewind(self, position: int) -> None:
        """Back to `position` (a fetch that failed leaves its rows to be fetched)."""
        if isinstance(self.rows, RowSpool) and position != self.position:
            self._batches, self._pending, self.position = None, [], 0
            while self.position < position:
                self.take(min(position - self.position, 1024))
        self.position = position


class Cursor:
    """A PEP 249 cursor; rows are tuples of Python ints (keys) and numpy arrays (tiles)."""

    def __init__(self, connection: "Connection"):
        self.connection = connection
        self.arraysize = 1
        self._result: Optional[Result] = None
        self._reader = RowReader([])
        self._rowcount = -1
        self._closed = False
        self._running = False

    # ------------------------------------------------------------ PEP 249

    @property
    def description(self) -> Optional[list[tuple]]:
        result = self._result
        if result is None:
            return None
        if result.schema is not None:
            return [_describe(c) for c in result.schema] or None
        return result.description

    @property
    def rowcount(self) -> int:
        return self._rowcount

    @property
    def statusmessage(self) -> Optional[str]:
        """What the last statement changed ("UPDATE A: 12 tiles"), as psycopg's cursor says; None after a query."""
        return self._result.status if self._result is not None else None

    def execute(self, operation: str, parameters: Optional[Sequence[Any]] = None) -> "Cursor":
        self._check_open()
        if not isinstance(operation, str):
            raise errors.ProgrammingError(f"execute() takes a statement string, got {type(operation).__name__}")
        _check_utf8(operation)
        if parameters is not None and (isinstance(parameters, (str, bytes, dict)) or
                                       not isinstance(parameters, Sequence)):
            raise errors.ProgrammingError("parameters must be a sequence (paramstyle is qmark: ?)")
        self._forget_result()
        self._running = True
        try:
            result = self.connection._session().execute(operation, tuple(parameters or ()))
        finally:
            self._running = False
        self._result, self._reader = result, RowReader(result.rows)
        self._rowcount = result.rowcount
        return self

    def executemany(self, operation: str, seq_of_parameters: Sequence[Sequence[Any]]) -> "Cursor":
        total = 0
        for parameters in seq_of_parameters:
            self.execute(operation, parameters)
            total += max(self._rowcount, 0)
        self._rowcount = total
        return self

    def fetchone(self) -> Optional[tuple]:
        rows = self._take(1)
        return rows[0] if rows else None

    def fetchmany(self, size: Optional[int] = None) -> list[tuple]:
        return self._take(self.arraysize if size is None else size)

    def fetchall(self) -> list[tuple]:
        return self._take(None)

    def close(self) -> None:
        """Close the cursor; a statement it is running (in another thread) is cancelled."""
        if self._running and self.connection._live is not None:
            self.connection._live.cancel()
        self._closed = True
        self._forget_result()

    def setinputsizes(self, sizes: Any) -> None:
        pass

    def setoutputsize(self, size: Any, column: Optional[int] = None) -> None:
        pass

    def callproc(self, procname: str, parameters: Sequence[Any] = ()) -> None:
        raise errors.NotSupportedError("trdb has no stored procedures")

    def nextset(self) -> None:
        return None

    def __iter__(self) -> Iterator[tuple]:
        while True:
            row = self.fetchone()
            if row is None:
                return
            yield row

    def __enter__(self) -> "Cursor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------ tensor extensions

    def fetch_tensor(self, shape: Optional[Sequence[int]] = None) -> np.ndarray:
        """The remaining rows assembled into one dense array (keys -> leading axes; absent tiles are zeros)."""
        result = self._tensor_result("fetch_tensor")
        return self._assembled("fetch_tensor()", assemble, result, shape)

    def fetch_sparse(self, shape: Optional[Sequence[int]] = None):
        """The remaining rows of a 2-d result as a scipy.sparse CSR matrix (`shape` as in fetch_tensor)."""
        result = self._tensor_result("fetch_sparse")
        return self._assembled("fetch_sparse()", result_to_sparse, result, shape)

    def fetch_arrow(self):
        """The remaining rows as a pyarrow Table: key columns and a fixed_shape_tensor column."""
        result = self._require_result("fetch_arrow")
        return result_to_arrow(result.schema, result.description, self._take(None))

    def fetchnumpy(self) -> dict[str, np.ndarray]:
        """The remaining rows as numpy columns: keys as int64 arrays, tiles stacked when they share a shape."""
        result = self._require_result("fetchnumpy")
        return result_to_numpy(result.schema, result.description, self._take(None))

    # ------------------------------------------------------------ internals

    def _forget_result(self) -> None:
        """The result is done with: its memory goes back to the budget, its spill file is removed."""
        if self._result is not None:
            self._result.close()
        self._result, self._reader = None, RowReader([])

    def _check_open(self) -> None:
        if self._closed:
            raise errors.InterfaceError("the cursor is closed")
        self.connection._session()

    def _require_result(self, what: str) -> Result:
        self._check_open()
        if self._result is None:
            raise errors.InterfaceError(f"{what}(): no statement has been executed")
        return self._result

    def _tensor_result(self, what: str) -> Result:
        result = self._require_result(what)
        if result.schema is None:
            raise errors.InterfaceError(f"{what}(): the result is not a tensor relation")
        return result

    def _assembled(self, what: str, how, result: Result, shape: Optional[Sequence[int]]):
        """The remaining rows as one array; on an error (too big to hold) they stay to be fetched."""
        settings = self.connection._session().settings
        check_result_fits(what, result, settings.memory_limit)
        position = self._reader.position
        limits = {"max_bytes": settings.max_bytes, "this machine's memory": physical_memory()}
        try:
            return how(result.schema, self._take(None, keep_sparse=True), shape, limits)
        except errors.Error:
            self._reader.rewind(position)
            raise

    def _take(self, count: Optional[int], keep_sparse: bool = False) -> list[tuple]:
        """The next rows with host values; CSR tiles stay CSR (scipy) with `keep_sparse`, else become numpy."""
        self._require_result("fetch")
        rows = self._reader.take(None if count is None else max(count, 0))
        if keep_sparse:
            return [tuple(to_host(v, True) for v in row) for row in rows]
        return [tuple(_user_value(v) for v in row) for row in rows]


def _user_value(value: Any) -> Any:
    """A value as fetchone/fetchall give it: a 0-d tensor is a numpy scalar of its dtype (np.float32(16.0)),
    which keeps the dtype `description` reports and sits in a pandas column as a number."""
    value = to_host(value)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]
    return value


class Connection:
    """A PEP 249 connection to one trdb database (in memory, or a file)."""

    Warning, Error, InterfaceError, DatabaseError = errors.Warning, errors.Error, errors.InterfaceError, \
        errors.DatabaseError
    DataError, OperationalError, IntegrityError = errors.DataError, errors.OperationalError, errors.IntegrityError
    InternalError, ProgrammingError, NotSupportedError = errors.InternalError, errors.ProgrammingError, \
        errors.NotSupportedError

    def __init__(self, database: Optional[str] = None, settings: Optional[dict[str, Any]] = None,
                 read_only: bool = False):
        from trdb.session import Session

        self.database = database
        self._live = Session(database, settings, read_only)
        self._cursors: weakref.WeakSet = weakref.WeakSet()  # their results are forgotten when the connection closes

    def _session(self):
        if self._live is None:
            raise errors.InterfaceError("the connection is closed")
        return self._live

    def cursor(self) -> Cursor:
        self._session()
        cursor = Cursor(self)
        self._cursors.add(cursor)
        return cursor

    def execute(self, operation: str, parameters: Optional[Sequence[Any]] = None) -> Cursor:
        """A shortcut, as in sqlite3 and DuckDB: a new cursor that has run the statement."""
        return self.cursor().execute(operation, parameters)

    def commit(self) -> None:
        self._session().commit()

    def rollback(self) -> None:
        self._session().rollback()

    def close(self) -> None:
        for cursor in list(getattr(self, "_cursors", ())):
            cursor._forget_result()
        if self._live is not None:
            self._live.close()
            self._live = None

    @property
    def closed(self) -> bool:
        return self._live is None

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._live is not None:
            self.commit() if exc_type is None else self.rollback()
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def connect(database: Optional[str] = None, *, read_only: bool = False, address: Optional[str] = None,
            **settings: Any) -> Connection:
    """Open a trdb database: in memory when `database` is None or ':memory:', else the named file.

    Connections to one file in one process share one database (catalog, buffer pool), each with its
    own transaction and settings; `read_only=True` opens it for reading (another process may then
    read it too, while no process writes it). Keywords set settings for the connection
    (`executor='ray'`, `workers=4`); `address` is the Ray cluster's (the `ray_address` setting).
    """
    if database == ":memory:":
        database = None
    if address is not None:
        settings["ray_address"] = address
    return Connection(database, settings, read_only)
