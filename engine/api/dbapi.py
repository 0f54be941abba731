"""The PEP 249 (DB-API 2.0) Connection and Cursor, with tensor extensions (fetch_tensor, fetch_arrow...)."""
from __future__ import annotations

import functools
import weakref
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from trdb import errors
from trdb.api.collected_close import close_pending, close_when_freed
from trdb.api.conversions import result_to_sparse
from trdb.api.ctrl_c import DeferredCtrlC
from trdb.api.duckdb_conveniences import DuckDBConveniences
from trdb.api.named_parameters import colon_placeholders
from trdb.api.replacement_scans import python_scans, user_frame
from trdb.api.result_formats import ResultFormats
from trdb.api.result_sets import without_row_count
from trdb.api.row_reader import RowReader, fetching, user_row
from trdb.config.settings import physical_memory
from trdb.execution.result import Result, assemble, check_result_fits
from trdb.kernels.backend import to_host
from trdb.plan.types import Column


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


def _describe(column: Column) -> tuple:
    return (column.name, str(column.type), None, None, None, None, column.is_key)


class Cursor(ResultFormats):
    """A PEP 249 cursor; rows are tuples of Python ints (keys) and numpy arrays (tiles)."""

    def __init__(self, connection: "Connection"):
        self.connection = connection
        self.arraysize = 1
        self._result: Optional[Result] = None
        self._reader = RowReader([])
        self._rowcount = -1
        self._closed = False
        self._running = False
        self.messages: list = []  # PEP 249's optional extension: trdb sends no warnings this way, so it stays empty
        self.lastrowid = None  # tensors and DuckDB tables have no row ids a client can use

    @property
    def rownumber(self) -> Optional[int]:
        """PEP 249's optional extension: the 0-based index of the next row to fetch (None without a result)."""
        return None if self._result is None else self._reader.position

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

    def execute(self, operation: str, parameters: Optional[Union[Sequence[Any], Mapping[str, Any]]] = None
                ) -> "Cursor":
        """Run a statement; `parameters`: a sequence for `?` and `$1`, a mapping for `$name` and `:name`."""
        self._check_open()
        if not isinstance(operation, str):
            raise errors.ProgrammingError(f"execute() takes a statement string, got {type(operation).__name__}")
        _check_utf8(operation)
        if parameters is not None and (isinstance(parameters, (str, bytes)) or
                                       not isinstance(parameters, (Sequence, Mapping))):
            raise errors.ProgrammingError("parameters must be a sequence (for ? and $1) or a mapping (for $name "
                                          f"and :name), got {type(parameters).__name__}")
        self._forget_result()
        del self.messages[:]
        close_pending()  # connections the collector freed since the last statement
        self.connection.unregister_released()
        bound = parameters if isinstance(parameters, Mapping) else tuple(parameters or ())
        text = colon_placeholders(operation, bound) if isinstance(bound, Mapping) else operation
        result = self._run(text, bound, operation)
        self._result, self._reader = result, RowReader(result.rows)
        self._rowcount = result.rowcount
        return self

    def _run(self, text: str, bound: Union[tuple, Mapping[str, Any]], written: str) -> Result:
        """Run `text` (the statement as `written`, `:name` placeholders as `$name`); errors quote it as written."""
        self._running = True
        try:
            session = self.connection._session()
            scans = python_scans(text, user_frame(), session.known_relation)
            with DeferredCtrlC(session.cancel):
                return without_row_count(session.execute(text, bound, scans), text)
        except errors.Error as exc:
            if exc.statement == text and text != written:
                exc.statement = written
            raise
        finally:
            self._running = False

    def executemany(self, operation: str, seq_of_parameters: Sequence[Sequence[Any]]) -> "Cursor":
        total = 0
        for parameters in seq_of_parameters:
            self.execute(operation, parameters)
            total += max(self._rowcount, 0)
        self._rowcount = total
        return self

    @fetching
    def fetchone(self) -> Optional[tuple]:
        rows = self._take(1)
        return rows[0] if rows else None

    @fetching
    def fetchmany(self, size: Optional[int] = None) -> list[tuple]:
        return self._take(self.arraysize if size is None else size)

    @fetching
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

    def callproc(self, procname: str, parameters: Sequence[Any] = ()) -> Sequence[Any]:
        """Call a DuckDB function (or macro) by name with SELECT, as psycopg calls a function: its value is the
        result set; the parameters come back unchanged (trdb has no output parameters)."""
        if not isinstance(procname, str) or not procname.strip():
            raise errors.ProgrammingError("callproc() takes a function name")
        parameters = tuple(parameters or ())
        name = ".".join('"' + part.replace('"', '""') + '"' for part in procname.split("."))
        self.execute(f"SELECT {name}({', '.join('?' * len(parameters))})", parameters)
        return parameters

    def nextset(self) -> None:
        return None

    def scroll(self, value: int, mode: str = "relative") -> None:
        """PEP 249's optional extension: move to another row of the result, `value` rows on (`relative`) or to
        row `value` (`absolute`, 0-based); IndexError where that row would lie outside the result."""
        result = self._require_result("scroll")
        if mode not in ("relative", "absolute"):
            raise errors.ProgrammingError(f"scroll(): unknown mode {mode!r}", hint="'relative' or 'absolute'")
        if result.schema is None and result.description is None:
            raise errors.InterfaceError("scroll(): the last statement produced no result set")
        target = self._reader.position + value if mode == "relative" else value
        if not 0 <= target <= len(result.rows):
            raise IndexError(f"scroll(): row {target} is outside the result's {len(result.rows)} rows")
        if target < self._reader.position:
            self._reader.rewind(target)
        else:
            self._reader.skip(target - self._reader.position)

    def __next__(self) -> tuple:
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row

    def next(self) -> tuple:
        """PEP 249's optional extension: the next row, StopIteration at the end."""
        return self.__next__()

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

    @fetching
    def fetch_tensor(self, shape: Optional[Sequence[int]] = None) -> np.ndarray:
        """The remaining rows assembled into one dense array (keys -> leading axes; absent tiles are zeros)."""
        result = self._tensor_result("fetch_tensor")
        canvas, result.canvas = result.canvas, None  # an array placed for the result is the caller's once handed over
        return self._assembled("fetch_tensor()", functools.partial(assemble, canvas=canvas), result, shape,
                               columns=canvas is None)

    @fetching
    def fetch_sparse(self, shape: Optional[Sequence[int]] = None):
        """The remaining rows of a 2-d result as a scipy.sparse CSR matrix (`shape` as in fetch_tensor)."""
        result = self._tensor_result("fetch_sparse")
        return self._assembled("fetch_sparse()", result_to_sparse, result, shape)

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

    def _assembled(self, what: str, how, result: Result, shape: Optional[Sequence[int]], columns: bool = False):
        """The remaining rows as one array; on an error (too big to hold) they stay to be fetched. `columns`: `how`
        takes them as column batches where they all are (execution/placed_columns.py)."""
        settings = self.connection._session().settings
        check_result_fits(what, result, settings.memory_limit)
        position = self._reader.position
        limits = {"max_bytes": settings.max_bytes, "this machine's memory": physical_memory()}
        try:
            rows = (self._reader.take_column_batches() if columns else None) or self._host_rows(what)
            return how(result.schema, rows, shape, limits)
        except errors.Error:
            self._reader.rewind(position)
            raise
        except MemoryError as exc:  # more than the process can allocate now (its limits, other work)
            self._reader.rewind(position)
            raise errors.out_of_memory(exc, hint=f"{what} builds the whole result as one array: fetch it in "
                                                 "parts (fetchmany(), or a WHERE on its keys)") from exc
        except Exception as exc:  # a bug: an InternalError, as a statement's, never a bare traceback
            self._reader.rewind(position)
            raise errors.InternalError(f"internal error in {what}: {type(exc).__name__}: {exc}") from exc

    def _host_rows(self, what: str) -> list[tuple]:
        """The remaining rows in host memory (a GPU statement's tiles copied back), or an OperationalError
        when this process cannot allocate that now (the caller leaves the rows to be fetched)."""
        try:
            return self._take(None, keep_sparse=True)
        except MemoryError:
            raise errors.OperationalError(f"{what}: copying the result's tiles to the host needs more than this "
                                          "process can allocate now", hint="fetchall() returns it tile by tile"
                                          ) from None

    def _take(self, count: Optional[int], keep_sparse: bool = False) -> list[tuple]:
        """The next rows with host values; CSR tiles stay CSR (scipy) with `keep_sparse`, else become numpy."""
        result = self._require_result("fetch")
        if result.schema is None and result.description is None:
            raise errors.InterfaceError("fetch: the last statement produced no result set (only queries, "
                                        "SHOW, DESCRIBE, EXPLAIN and plain SQL that returns rows have one)")
        rows = self._reader.take(None if count is None else max(count, 0))
        if keep_sparse:
            return [tuple(to_host(v, True) for v in row) for row in rows]
        return [user_row(row) for row in rows]


class Connection(DuckDBConveniences):
    """A PEP 249 connection to one trdb database (in memory, or a file)."""

    Warning, Error, InterfaceError, DatabaseError = errors.Warning, errors.Error, errors.InterfaceError, \
        errors.DatabaseError
    DataError, OperationalError, IntegrityError = errors.DataError, errors.OperationalError, errors.IntegrityError
    InternalError, ProgrammingError, NotSupportedError = errors.InternalError, errors.ProgrammingError, \
        errors.NotSupportedError

    def __init__(self, database: Optional[str] = None, settings: Optional[dict[str, Any]] = None,
                 read_only: bool = False):
        from trdb.session.session import Session

        self.database = database
        self._live = Session(database, settings, read_only)
        self._cursors: weakref.WeakSet = weakref.WeakSet()  # their results are forgotten when the connection closes
        self.messages: list = []  # PEP 249's optional extension, as on the cursor: trdb sends no warnings this way
        self.released_frames: list[str] = []  # registered for relations now gone (relation_sources.py)

    def _session(self):
        if self._live is None:
            raise errors.InterfaceError("the connection is closed")
        return self._live

    def cursor(self) -> Cursor:
        self._session()
        cursor = Cursor(self)
        self._cursors.add(cursor)
        return cursor

    def execute(self, operation: str, parameters: Optional[Union[Sequence[Any], Mapping[str, Any]]] = None
                ) -> Cursor:
        """A shortcut, as in sqlite3 and DuckDB: a new cursor that has run the statement."""
        return self.cursor().execute(operation, parameters)

    def executemany(self, operation: str, seq_of_parameters: Sequence[Any]) -> Cursor:
        """A shortcut, as in sqlite3 and DuckDB: a new cursor that has run the statement once per parameters."""
        return self.cursor().executemany(operation, seq_of_parameters)

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
        """As DuckDB's connection does: close on exit. What each statement did stays (statements commit by
        themselves); a transaction that BEGIN opened and nothing ended is rolled back, as close() does."""
        self.close()

    def __del__(self) -> None:
        try:
            close_when_freed(self.close)
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
    close_pending()  # a connection the collector freed may still hold its file
    if database == ":memory:":
        database = None
    if address is not None:
        settings["ray_address"] = address
    return Connection(database, settings, read_only)
