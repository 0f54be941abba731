"""What the shell and batch files share: reading a script into statements and dot commands, running them, printing."""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import Iterator, Optional, TextIO

import numpy as np

from trdb.api.dbapi import Connection
from trdb.api.shell import progress
from trdb.api.shell.commands import CommandError, run_command
from trdb.api.shell.formatting import format_rows
from trdb.errors import Error, QueryCancelled
from trdb.parser import is_complete, split_statements

EXPLAINABLE = re.compile(r"\s*(\(\s*)*(SELECT|WITH|VALUES)\b", re.I)
QUIET = re.compile(r"\s*(SET|RESET)\b", re.I)  # settings print nothing, as in the duckdb CLI
QUIT_WORDS = re.compile(r"\s*(\\q|quit|exit)(\(\))?\s*;?\s*$", re.I)  # psql's \q; quit, exit (and Python's exit())
# DuckDB's answer to a statement without rows (a one-column count or `Success`): the shell prints a line instead
NO_ROWS = re.compile(r"\s*(CREATE|INSERT|UPDATE|DELETE|DROP|ALTER|SET|RESET|COPY|CHECKPOINT|BEGIN|COMMIT|ROLLBACK|"
                     r"INSTALL|LOAD|USE|VACUUM|ANALYZE|PRAGMA|DETACH|IMPORT|EXPORT)\b", re.I)


class Cancelled(Exception):
    """A statement was cancelled with Ctrl-C: the rest of the script does not run."""


@dataclass
class Item:
    """One piece of a script: a statement ("sql") or a dot command ("dot"), and its first line."""

    kind: str
    text: str
    line: int


def _at_boundary(buffer: str) -> bool:
    """No statement started: only white space and closed comments so far."""
    return not buffer.strip() or (not split_statements(buffer) and is_complete(buffer + ";"))


def script_items(text: str) -> Iterator[Item]:
    """The statements and dot commands of a script, in order; a dot command is a line starting
    with `.` where no statement is under way."""
    buffer, start = "", 1
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        if _at_boundary(buffer) and QUIT_WORDS.match(line):
            yield Item("dot", ".quit", number)
            buffer = ""
            continue
        if line.lstrip().startswith((".", "\\")) and _at_boundary(buffer):  # a dot command, or psql's backslash one
            command, _, rest = line.strip().partition(";")  # `.mode csv; SELECT 1;`: SQL may follow on the line
            yield Item("dot", command.strip(), number)
            buffer, line, start = "", rest, number
            if not rest.strip():
                continue
        if not buffer.strip():
            buffer, start = "", number
        buffer += line
        if ";" in line and is_complete(buffer):
            yield from _statements(buffer, start)
            buffer = ""
    yield from _statements(buffer, start)


def _statements(buffer: str, start: int) -> Iterator[Item]:
    for piece in split_statements(buffer):
        yield Item("sql", piece.text, start + piece.line - 1)


def _first_line(sql: str, width: int = 120) -> str:
    lines = sql.splitlines() or [""]
    first = lines[0] if len(lines[0]) <= width else lines[0][:width]
    return first + (" ..." if len(lines) > 1 or first != lines[0] else "")


class Runner:
    """Runs statements and dot commands on one connection and prints what they return."""

    def __init__(self, con: Connection, mode: str = "table", out: TextIO = None, err: TextIO = None,
                 interactive: bool = False, database: Optional[str] = None):
        self.con = con
        self.database = database
        self.mode = mode
        self.stdout = out or sys.stdout
        self.out = self.stdout
        self.err = err or sys.stderr
        self.interactive = interactive
        self.timer = self.explain = self.echo = self.bail = False
        self.headers = True
        self.max_rows: Optional[int] = 40 if interactive else None
        self.generation = 0  # counts statements run: completion refreshes its names when it changes
        self.losses: list[float] = []  # the last MINIMIZE's loss per step (for .plot loss)
        self._progress = False  # the `progress` setting, as last read
        self._once = False
        self.output_name = "stdout"

    def run_script(self, text: str, source: Optional[str] = None, bail: bool = True) -> int:
        """Run each statement and dot command; 0 when all succeeded, else 1 (stops at the first error
        when bail or .bail on). Raises Cancelled after Ctrl-C, Quit on .quit."""
        status = 0
        for item in script_items(text):
            where = f"{source}:{item.line}" if source else None
            if self.echo:
                self.message(item.text if item.kind == "dot" else item.text + ";")
            ok = run_command(self, item.text, where) if item.kind == "dot" else self.run_sql(item.text, where)
            if not ok:
                status = 1
                if bail or self.bail:
                    break
        return status

    def run_sql(self, sql: str, where: Optional[str] = None) -> bool:
        """Run one statement and print its result or its error; False after an error."""
        if self.explain and EXPLAINABLE.match(sql):
            sql = "EXPLAIN " + sql
        self.generation += 1
        steps = progress.StepReport()
        try:
            outcome = progress.execute(self.con, sql, self._progress_stream(), steps)
        except QueryCancelled as exc:
            self._keep_losses(steps)
            if where:
                self.error(exc, where, sql)
            else:
                self.message("Cancelled." + steps.kept_note(), self.err)
            raise Cancelled() from None
        except Exception as exc:  # Error, or a bug: one message either way, never a traceback
            self._keep_losses(steps)
            self.error(exc, where, sql)
            return False
        self._keep_losses(steps)
        try:
            self.show(outcome, sql)
        except BrokenPipeError:
            raise  # the reader of a pipe left: main stops writing
        except Exception as exc:  # noqa: BLE001 - a bug in printing the result: one message, never a traceback
            self.error(exc, where, sql)
            return False
        return True

    def _keep_losses(self, steps: "progress.StepReport") -> None:
        if steps.losses:
            self.losses = list(steps.losses)

    def _progress_stream(self) -> Optional[TextIO]:
        """stderr when it is a terminal and the `progress` setting is on (the shell turns it on)."""
        if not progress.is_terminal(self.err):
            return None
        try:
            value = self.con.execute("SHOW progress").fetchone()[0]
            self._progress = str(value).lower() in ("on", "true", "1")
        except Error:
            pass  # e.g. in an aborted transaction: keep the last value
        return self.err if self._progress else None

    def show(self, outcome: progress.Outcome, sql: str = "") -> None:
        """The rows; for a statement without rows its status line (in the shell, or with .echo on)."""
        if outcome.names is not None and not _no_rows(outcome, sql):
            self.print_rows(outcome.names, _at_dtype(outcome.rows, outcome.types), outcome.types)
        elif (self.interactive or self.echo) and not QUIET.match(sql):
            status = outcome.status or _count_status(outcome, sql)
            if status:
                print(status, file=self.out)
        if self.timer:
            print(f"Run Time: {outcome.elapsed:.3f} s", file=self.out)
        self.out.flush()
        self._end_once()

    def print_rows(self, names: list[str], rows: list[tuple], types: Optional[list] = None) -> None:
        text = format_rows(names, rows, self.mode, self.max_rows, self.width(), self.headers, types)
        if text or self.mode not in ("jsonlines", "raw"):
            print(text, file=self.out)

    def width(self) -> Optional[int]:
        """The terminal's width when results go to one (tables are fitted to it), else None."""
        if not progress.is_terminal(self.out):
            return None
        try:
            return os.get_terminal_size(self.out.fileno()).columns
        except (OSError, ValueError, AttributeError):
            return None

    def redirect(self, path: Optional[str], once: bool) -> None:
        """.output FILE / .once FILE: results go to the file (for the next statement only with once)."""
        handle = None
        if path is not None:
            try:
                handle = open(path, "w", encoding="utf-8")
            except OSError as exc:
                raise CommandError(f"cannot write {path}: {exc.strerror}") from None
        self._close_output()
        if handle is not None:
            self.out, self.output_name, self._once = handle, path, once

    def _close_output(self) -> None:
        if self.out is not self.stdout:
            self.out.close()
        self.out, self.output_name, self._once = self.stdout, "stdout", False

    def _end_once(self) -> None:
        if self._once:
            self._close_output()

    def replace_connection(self, con: Connection, database: Optional[str]) -> None:
        """.open: the old connection is committed and closed, the new one takes its settings."""
        old, self.con, self.database = self.con, con, database
        close_connection(old, self.err)
        self.generation += 1
        if self.interactive:
            con.execute("SET progress = on")

    def close(self) -> None:
        self._close_output()
        close_connection(self.con, self.err)

    def error(self, exc: BaseException, where: Optional[str] = None, sql: Optional[str] = None) -> None:
        """One message: `Error: [FILE:LINE: ]` and the exception's text (with its caret); in a script,
        the statement's first line when the message does not show it."""
        message = str(exc) if isinstance(exc, (Error, CommandError)) else f"{type(exc).__name__}: {exc}"
        text = f"Error: {where}: {message}" if where else f"Error: {message}"
        if where and sql and getattr(exc, "statement", None) is None:
            text += f"\nSTATEMENT: {_first_line(sql)}"
        self.out.flush()
        print(text, file=self.err)
        self.err.flush()

    def message(self, text: str, stream: Optional[TextIO] = None) -> None:
        self.out.flush()
        print(text, file=stream or self.out, flush=True)


def _at_dtype(rows: list[tuple], types: list) -> list[tuple]:
    """FLOAT columns as float32 values (DuckDB hands them over as Python floats): 0.1, not 0.10000000149011612."""
    single = [c for c, kind in enumerate(types) if str(kind).upper() in ("FLOAT", "REAL", "FLOAT4")]
    if not single:
        return rows
    as32 = lambda value: np.float32(value) if isinstance(value, float) else value
    return [tuple(as32(v) if c in single else v for c, v in enumerate(row)) for row in rows]


def _no_rows(outcome: progress.Outcome, sql: str) -> bool:
    """DuckDB's `Count` or `Success` column for a statement that changes something: not a result to show."""
    return len(outcome.names or ()) == 1 and outcome.names[0] in ("Count", "Success") and bool(NO_ROWS.match(sql))


def _count_status(outcome: progress.Outcome, sql: str) -> Optional[str]:
    """`INSERT: 3 rows` for plain SQL that DuckDB counted, where the statement set no status of its own."""
    if outcome.names != ["Count"] or not outcome.rows or not NO_ROWS.match(sql):
        return None
    verb = " ".join(sql.split()[:2]).upper() if sql.split()[0].upper() == "CREATE" else sql.split()[0].upper()
    count = outcome.rows[0][0]
    return f"{verb}: {count} row{'s' if count != 1 else ''}"


def close_connection(con: Connection, err: TextIO) -> None:
    """Commit and close; an aborted transaction left open is rolled back (and said so)."""
    try:
        con.commit()
    except Error as exc:
        print(f"Error: {exc}", file=err)
    finally:
        con.close()
