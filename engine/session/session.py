"""A session on one database: runs statements atomically, routing plain SQL to DuckDB."""
from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import contextmanager, nullcontext, suppress
from functools import partial
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

from trdb import errors
from trdb.catalog.catalog import Catalog
from trdb.config.settings import Settings
from trdb.execution import full_collections
from trdb.execution.result import Result
from trdb.kernels.cupy_backend import out_of_device_memory
from trdb.kernels.device_choice import backend_for
from trdb.parser import ParseError, ast, parse, split_statements
from trdb.pipeline.plan_cache import PlanCache
from trdb.pipeline.plan_memo import PlanMemo
from trdb.pipeline.shared_work import CarriedWork
from trdb.planner.expression_binder import BindContext
from trdb.session.plain_sql_routing import (
    Relations,
    bind_named,
    count_params,
    duckdb_text,
    is_plain_sql,
    query_relations,
)
from trdb.session.plain_sql_runner import PlainSqlRunner
from trdb.session.python_views import PythonViews
from trdb.session.status import status_message
from trdb.statements import coo, copy, ddl, dml, explaining, export, inspect, listings, minimize, summarize
from trdb.statements.context import StatementContext
from trdb.storage.database import Database
from trdb.storage.text_memory import reserve_text

_PARSE_CACHE_SIZE = 512
_CACHED_TEXT = 16 << 10  # characters: longer statement texts are parsed again each time
_STALE_RETRIES = 3  # a read that met another connection's commit runs again; the last try in a transaction

Handler = Callable[[StatementContext, Any], Result]
_WRITES: dict[type, Handler] = {
    ast.CreateTensor: ddl.creating(ddl.create_tensor), ast.CreateTensorFrom: ddl.creating(ddl.create_tensor_from),
    ast.CreateTensorAs: ddl.creating(ddl.create_tensor_as), ast.CreateView: ddl.create_view, ast.Drop: ddl.drop,
    ast.AlterRename: ddl.alter_rename,
    ast.InsertValues: dml.insert_values, ast.InsertQuery: dml.insert_query, ast.Update: dml.update,
    ast.Delete: dml.delete,
    ast.CreateTensorFromCoo: ddl.creating(coo.create_tensor_from_coo),
    ast.CopyFrom: copy.copy_from, ast.ImportDatabase: export.import_database,
}
_READS: dict[type, Handler] = {
    ast.ShowTensors: inspect.show_tensors, ast.ShowViews: inspect.show_views, ast.Describe: inspect.describe,
    ast.SetSetting: inspect.set_setting, ast.ResetSetting: inspect.reset_setting,
    ast.ShowSetting: inspect.show_setting, ast.Explain: explaining.explain,
    ast.ShowTables: listings.show_tables, ast.ShowAll: listings.show_all, ast.DescribeQuery: inspect.describe_query,
    ast.Summarize: summarize.summarize, ast.SummarizeQuery: summarize.summarize_query,
    ast.CopyTo: copy.copy_to, ast.ExportDatabase: export.export_database,
}


class Session(PlainSqlRunner, PythonViews):
    """One connection: its settings, transaction, catalog mirror and caches, over a database that
    every connection to the same file in this process shares (its buffer pool among them)."""

    def __init__(self, path: Optional[str] = None, settings: Optional[dict[str, Any]] = None,
                 read_only: bool = False):
        self.settings = Settings()
        for name, value in (settings or {}).items():
            self.settings.set(name, value)
        self.db = Database(path, read_only, self.settings.memory_limit)
        shared_before = dict(self.db.file.shared_settings)
        try:
            self.settings.share(self.db.file.shared_settings, frozenset(n.lower() for n in (settings or {})))
            self.db.file.apply_settings()
            self.pool = self.db.file.pool
            self.catalog = Catalog(self.db)
        except BaseException:
            _put_back(self.db.file, shared_before)
            self.db.close()
            raise
        self.aborted = False
        # text -> the statement, its parameter count and routing's query_relations
        self._parsed: OrderedDict[str, tuple[ast.Statement, int, Optional[Relations]]] = OrderedDict()
        self.plans = PlanCache()
        self.plan_memo = PlanMemo()  # physical plans (MINIMIZE's steps, queries), kept across statements
        self.carried = CarriedWork(lambda: self.settings.memory_limit // 4)
        self.db.file.memory.add_shrinker(self.carried.shrink)  # carried work gives way when memory is short
        self.lock = threading.RLock()
        self._running: Optional[threading.Event] = None
        self._in_duckdb = False

    # ------------------------------------------------------------ entry point

    def execute(self, text: str, params: Union[Sequence[Any], Mapping[str, Any]] = (),
                scans: Optional[Mapping[str, Any]] = None) -> Result:
        """Run a statement, or several separated by `;` (the last one's result is returned). `scans`: Python
        data frames the text names that no relation has, readable as views while it runs (replacement scans)."""
        if scans:
            with self.lock:
                with self._scans(scans):
                    return self.execute(text, params)
        pieces = split_statements(text)
        if not pieces:
            raise errors.ProgrammingError("empty statement")
        if len(pieces) > 1 and params:
            raise errors.ProgrammingError("parameters can only be bound to a single statement")
        result = Result()
        with self.lock, full_collections.deferred():
            self._running = threading.Event()  # set before parsing: a cancel that early is kept
            try:
                for piece in pieces:
                    with reserve_text(self.db.file.memory, piece.text):  # refused here if memory_limit cannot parse it
                        result = self._execute_one(piece.text, params)
            finally:
                self._running = None
        return result

    def _execute_one(self, text: str, params: Union[Sequence[Any], Mapping[str, Any]]) -> Result:
        try:
            statement, expected, relations = self._parse(text)
        except ParseError as exc:  # a mapping goes to DuckDB as it is ($name)
            return self._guarded(text, partial(self._fallback, text, params, exc))
        except MemoryError as exc:  # parsing allocates too: the statement fails as one that ran out would
            raise self._failed(errors.out_of_memory(exc, hint="the process could not allocate what parsing the "
                                                              "statement needs: free memory, and run it again"),
                               text) from exc
        if isinstance(params, Mapping):
            params = bind_named(statement, params)
        if self.aborted and not isinstance(statement, ast.Rollback):
            raise errors.OperationalError("current transaction is aborted, commands ignored until end of "
                                          "transaction block", hint="ROLLBACK")
        return self._guarded(text, lambda: self._run_parsed(statement, text, params, expected, relations))

    def _run_parsed(self, statement: ast.Statement, text: str, params: Sequence[Any], expected: int,
                    relations: Optional[Relations]) -> Result:
        result = self._dispatch_consistent(statement, text, params, expected, relations)
        if result.status is None and result.description is None:
            result.status = status_message(statement, result, self.catalog)
        return result

    def _guarded(self, text: str, run: Callable[[], Result]) -> Result:
        """`run()`, a statement's execution (trql's, or plain SQL's through DuckDB): whatever it raises
        fails the statement (an explicit transaction is aborted) as one of trdb's errors; Ctrl-C and
        a too deep recursion go on as they are."""
        try:
            return run()
        except errors.Error as exc:
            raise self._failed(exc, text)
        except MemoryError as exc:  # an allocation the process could not make: the statement fails, as in
            # PostgreSQL and DuckDB, and its transaction has rolled back
            raise self._failed(out_of_device_memory(exc) or errors.out_of_memory(exc), text) from exc
        except (KeyboardInterrupt, RecursionError):
            self._after_failure()
            raise
        except Exception as exc:  # a bug: report it as an InternalError, never a bare traceback
            error = out_of_device_memory(exc) or errors.InternalError(f"internal error: {type(exc).__name__}: {exc}")
            raise self._failed(error, text) from exc

    def _parse(self, text: str) -> tuple[ast.Statement, int, Optional[Relations]]:
        """The statement, how many parameters it takes and what routing needs of it, cached by text."""
        parsed = self._parsed.get(text)
        if parsed is None:
            statement = parse(text)
            parsed = (statement, count_params(statement), query_relations(statement))
            if len(text) <= _CACHED_TEXT:  # a long text (literal data) is rarely run again: kept, it holds memory
                self._parsed[text] = parsed
            if len(self._parsed) > _PARSE_CACHE_SIZE:
                self._parsed.popitem(last=False)
        return parsed

    def _failed(self, exc: errors.Error, text: str) -> errors.Error:
        self._after_failure()
        return exc

    def _after_failure(self) -> None:
        if self.db.explicit_transaction:
            self.aborted = True

    # ------------------------------------------------------------ dispatch

    def _dispatch_consistent(self, statement: ast.Statement, text: str, params: Sequence[Any],
                             expected: int, relations: Optional[Relations]) -> Result:
        """Dispatch; a read that met another connection's commit runs again, the last time inside a
        read transaction (one snapshot throughout)."""
        for _ in range(_STALE_RETRIES - 1):
            try:
                return self._dispatch(statement, text, params, expected, relations)
            except errors.StaleSnapshot:
                if self.db.in_transaction or _writes(statement):  # writes read in their own transaction
                    raise
        with self.db.statement(writes=False):
            return self._dispatch(statement, text, params, expected, relations)

    def _dispatch(self, statement: ast.Statement, text: str, params: Sequence[Any], expected: int,
                  relations: Optional[Relations]) -> Result:
        if expected != len(params) and not isinstance(statement, (ast.Begin, ast.Commit, ast.Rollback)):
            raise errors.ProgrammingError(f"the statement has {expected} parameter(s) but {len(params)} "
                                          f"were given")
        if isinstance(statement, (ast.Begin, ast.Commit, ast.Rollback)):
            return self._transaction(statement)
        if not self.db.explicit_transaction:
            self.catalog.sync()  # another connection may have committed since this one's last statement
        if is_plain_sql(statement, self.catalog, relations):
            if isinstance(statement, ast.CreateView) and (self.catalog.tensor(statement.name) or
                                                          self.catalog.view(statement.name)):
                if statement.if_not_exists:
                    return Result(rowcount=0, status=f'CREATE VIEW: "{statement.name}" already exists, skipped')
                raise errors.IntegrityError(f'a relation named "{statement.name}" already exists')
            return self._plain_sql(duckdb_text(statement, text), params, statement)
        sc = StatementContext(self.db, self.catalog, self.settings, backend_for(self.settings.device),
                              BindContext(text, params, self.settings.memory_limit),
                              self._running or threading.Event(), self.plans, self.carried, self.plan_memo)
        return self._run(sc, statement)

    def _run(self, sc: StatementContext, statement: ast.Statement) -> Result:
        if isinstance(statement, ast.QueryStatement):
            return sc.run_query_statement(statement.query)
        if isinstance(statement, ast.Minimize):
            return minimize.minimize(sc, statement, self._step)
        if type(statement) in _READS:
            with self._setting_restored_on_failure(statement):
                result = _READS[type(statement)](sc, statement)
                self.db.file.apply_settings()
            return result
        handler = _WRITES.get(type(statement))
        if handler is None:
            raise errors.NotSupportedError(f"{type(statement).__name__} statements are not supported yet")
        return self._atomic(lambda: handler(sc, statement))

    def _setting_restored_on_failure(self, statement: ast.Statement):
        if isinstance(statement, (ast.SetSetting, ast.ResetSetting)):
            return self.settings.restored_on_failure(statement.name, self.db.file.apply_settings)
        return nullcontext()

    def _atomic(self, work: Callable[[], Result]) -> Result:
        """Run a writing statement in its own transaction (or the open one); undo everything on failure. A
        cancel that came while it ran (during a long call into DuckDB, which trdb's statements interrupt only
        in a tile insert) fails it before it commits."""
        with self._step():
            result = work()
            if self._running is not None and self._running.is_set():
                raise errors.QueryCancelled("the statement was cancelled")
            return result

    @contextmanager
    def _step(self) -> Iterator[None]:
        """One atomic unit of work: a statement, or one step of MINIMIZE. Outside an explicit
        transaction, writers take the database's write lock, one at a time, each from the latest
        commit (no lost update); inside one, DuckDB reports a conflicting write as a TransactionConflict."""
        if self.db.explicit_transaction:
            yield
            return
        try:
            with self.db.file.write_lock:
                with self.db.statement():
                    self.catalog.sync()
                    yield
                self.catalog.committed()
        except BaseException:
            self.catalog.reload()  # the mirror may hold what was just rolled back
            raise

    def _transaction(self, statement: ast.Statement) -> Result:
        if isinstance(statement, ast.Begin):
            if self.db.explicit_transaction:
                raise errors.OperationalError("a transaction is already in progress")
            with self.db.file.write_lock:  # no commit lands between the snapshot and the catalog read
                self.db.begin()
                self.db.explicit_transaction = True
                self.db.pin_snapshot()
                self.catalog.sync()
        elif isinstance(statement, ast.Commit):
            self.commit()
        else:
            self.rollback()
        return Result(rowcount=0)

    def commit(self) -> None:
        if not self.db.explicit_transaction:
            return
        if self.aborted:
            self.rollback()
            raise errors.OperationalError("the transaction was aborted by an earlier error and has been "
                                          "rolled back")
        self.db.explicit_transaction = False
        try:
            self.db.commit()
        except BaseException:
            self.db.rollback()  # a failed commit (a conflict) leaves nothing behind
            self.catalog.reload()
            raise

    def rollback(self) -> None:
        if not self.db.explicit_transaction:
            return
        self.db.explicit_transaction = False
        self.aborted = False
        try:
            self.db.rollback()
        finally:
            self.catalog.reload()

    def cancel(self) -> None:
        """Stop the running statement (from another thread): its workers stop, it raises QueryCancelled."""
        interrupted = self._running
        if interrupted is not None:
            interrupted.set()
        if self._in_duckdb:
            self.db.interrupt()  # plain SQL runs inside DuckDB: ask it to stop
        elif interrupted is not None:
            self.db.interrupt_tile_insert()  # a long insert of tiles stops too; the rest checks the event

    def close(self) -> None:
        self.cancel()
        with self.lock:
            if self.db.explicit_transaction:
                self.rollback()
            self.db.file.memory.remove_shrinker(self.carried.shrink)
            self.carried.shrink(0)
            self.db.close()


def _put_back(file, shared_before: dict[str, Any]) -> None:
    """A connection that failed to open changes no database-wide setting of the others open on its file."""
    if shared_before:
        file.shared_settings.clear()
        file.shared_settings.update(shared_before)
        with suppress(Exception):  # they were in force before: the error that stopped the connection is the one to report
            file.apply_settings()


def _writes(statement: ast.Statement) -> bool:
    """Whether a statement changes the database (its work then runs in transactions of its own)."""
    return type(statement) in _WRITES or isinstance(statement, ast.Minimize)
