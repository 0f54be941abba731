"""What the shell and batch files share: reading a script into statements and dot commands, running them, printing."""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Iterator, Optional, TextIO

import trdb
from trdb.api import progress
from trdb.api.commands import CommandError, run_command
from trdb.api.formatting import format_rows
from trdb.errors import QueryCancelled
from trdb.parser import is_complete, split_statements

EXPLAINABLE = re.compile(r"\s*(\(\s*)*(SELECT|WITH|VALUES)\b", re.I)


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
        if line.lstrip().startswith(".") and _at_boundary(buffer):
            yield Item("dot", line.strip(), number)
            buffer = ""
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

    def __init__(self, con: trdb.Connection, mode: str = "table", out: TextIO = None, err: TextIO = None,
                 interactive: bool = False):
        self.con = con
        self.mode = mode
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.interactive = interactive
        self.timer = False
        self.explain = False
        self.max_rows: Optional[int] = 40 if interactive else None
        self.generation = 0  # counts statements run: completion refreshes its names when it changes
        self._progress = False  # the `progress` setting, as last read

    def run_script(self, text: str, source: Optional[str] = None, bail: bool = True) -> int:
        """Run each statement and dot command; 0 when all succeeded, else 1 (stops at the first error
        when bail). Raises Cancelled after Ctrl-C, Quit on .quit."""
        status = 0
        for item in script_items(text):
            where = f"{source}:{item.line}" if source else None
            ok = run_command(self, item.text, where) if item.kind == "dot" else self.run_sql(item.text, where)
            if not ok:
                status = 1
                if bail:
                    break
        return status

    def run_sql(self, sql: str, where: Optional[str] = None) -> bool:
        """Run one statement and print its result or its error; False after an error."""
        if self.explain and EXPLAINABLE.match(sql):
            sql = "EXPLAIN " + sql
        self.generation += 1
        try:
            outcome = progress.execute(self.con, sql, self._progress_stream())
        except QueryCancelled as exc:
            if where:
                self.error(exc, where, sql)
            else:
                self.message("Cancelled.", self.err)
            raise Cancelled() from None
        except Exception as exc:  # trdb.Error, or a bug: one message either way, never a traceback
            self.error(exc, where, sql)
            return False
        self.show(outcome)
        return True

    def _progress_stream(self) -> Optional[TextIO]:
        """stderr when it is a terminal and the `progress` setting is on (the shell turns it on)."""
        if not progress.is_terminal(self.err):
            return None
        try:
            value = self.con.execute("SHOW progress").fetchone()[0]
            self._progress = str(value).lower() in ("on", "true", "1")
        except trdb.Error:
            pass  # e.g. in an aborted transaction: keep the last value
        return self.err if self._progress else None

    def show(self, outcome: progress.Outcome) -> None:
        if outcome.names is not None:
            print(format_rows(outcome.names, outcome.rows, self.mode, self.max_rows), file=self.out)
        if self.timer:
            print(f"Run Time: {outcome.elapsed:.3f} s", file=self.out)
        self.out.flush()

    def error(self, exc: BaseException, where: Optional[str] = None, sql: Optional[str] = None) -> None:
        """One message: `Error: [FILE:LINE: ]` and the exception's text (with its caret); in a script,
        the statement's first line when the message does not show it."""
        message = str(exc) if isinstance(exc, (trdb.Error, CommandError)) else f"{type(exc).__name__}: {exc}"
        text = f"Error: {where}: {message}" if where else f"Error: {message}"
        if where and sql and getattr(exc, "statement", None) is None:
            text += f"\nSTATEMENT: {_first_line(sql)}"
        self.out.flush()
        print(text, file=self.err)
        self.err.flush()

    def message(self, text: str, stream: Optional[TextIO] = None) -> None:
        self.out.flush()
        print(text, file=stream or self.out, flush=True)
