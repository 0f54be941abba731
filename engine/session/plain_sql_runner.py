"""PlainSqlRunner: a session's plain SQL, run by DuckDB, and the fallback for text trql cannot parse."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from trdb import errors
from trdb.catalog.names import suggest
from trdb.config.settings import SETTINGS, Settings
from trdb.execution.result import Result
from trdb.parser import ParseError, ast
from trdb.session.plain_names import names_kept_apart
from trdb.session.plain_sql_routing import is_trql_only, names_trdb_relation, param_names, trdb_setting_hint
from trdb.session.status import plain_sql_status
from trdb.statements.names import does_not_exist
from trdb.storage.plain_sql import check_plain_parameters, check_plain_sql, run_plain_sql

_READ_ONLY_SQL = ("SELECT", "WITH", "FROM", "VALUES", "SHOW", "DESCRIBE", "EXPLAIN", "SUMMARIZE", "PRAGMA", "TABLE")


class PlainSqlRunner:
    """The plain SQL part of a Session (its base class): `db`, `catalog`, `settings`, `aborted`, `_running`
    and `_in_duckdb` are the session's."""

    def _plain_sql(self, text: str, params: Sequence[Any], statement: Optional[ast.Statement] = None) -> Result:
        if self._running is not None and self._running.is_set():
            raise errors.QueryCancelled("the statement was cancelled")
        check_plain_sql(text)  # refused before it counts as run: no setting suggested, no commit announced
        if params and statement is not None and not isinstance(params, Mapping) and param_names(statement):
            params = dict(zip(param_names(statement), params))  # DuckDB binds $name from a mapping only
        check_plain_parameters(params, self.settings.memory_limit)
        self._in_duckdb = True
        try:
            with names_kept_apart(self.catalog, text):  # one namespace: no table takes a tensor's name
                rows, description, rowcount = run_plain_sql(self.db, text, params)  # checks again (a cached look-up)
        except errors.ProgrammingError:
            if isinstance(statement, (ast.SetSetting, ast.ResetSetting, ast.ShowSetting)) and \
                    suggest(statement.name, SETTINGS):
                Settings.declared(statement.name)  # neither DuckDB's nor ours: name the trdb setting it resembles
            if isinstance(statement, ast.ShowSetting) and suggest(statement.name, self.catalog.relation_names()):
                raise does_not_exist(self.catalog, None, statement.name) from None  # SHOW of a misspelt tensor
            raise
        finally:
            self._in_duckdb = False
            self.catalog.forget_ordinary_tables()
            if not self.db.explicit_transaction and not text.lstrip().upper().startswith(_READ_ONLY_SQL):
                self.db.file.changed()  # other connections look the ordinary tables up again
        if not rows and description and [d[0] for d in description] in (["Count"], ["Success"]):
            description = None  # DDL and SET: DuckDB reports an empty count or success, which is no result
        described = [(d[0], str(d[1]), None, None, None, None, None) for d in description] if description else None
        return Result(rows=rows, description=described, rowcount=rowcount if rowcount >= 0 else len(rows),
                      status=plain_sql_status(text, rows, described))

    def _fallback(self, text: str, params: Sequence[Any], parse_error: ParseError) -> Result:
        """Text that trql cannot parse may still be plain SQL for DuckDB; otherwise report the parse error."""
        if self.aborted:
            raise errors.OperationalError("current transaction is aborted, commands ignored until end of "
                                          "transaction block", hint="ROLLBACK")
        setting_hint = trdb_setting_hint(text)  # trdb's setting, written as trql cannot read it: not DuckDB's to run
        error = errors.ProgrammingError(parse_error.message, hint=setting_hint or parse_error.hint,
                                        statement=parse_error.text, line=parse_error.line, column=parse_error.column)
        if setting_hint:
            check_plain_sql(text)  # a DuckDB setting trdb owns too (memory_limit) is refused as that, with its hint
        if setting_hint or is_trql_only(text):
            raise error
        try:
            return self._plain_sql(text, params)
        except errors.IntegrityError:
            raise  # DuckDB read it, and a name or key it wanted was taken (names_kept_apart): that is the error
        except errors.Error as exc:
            # DuckDB could not run it either: a statement about tensors gets trql's error (with the caret)
            ours = "Parser Error" in str(exc) or names_trdb_relation(text, self.catalog)
            raise error if ours else exc
