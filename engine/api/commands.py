"""The shell's dot commands: .help .tables .schema .timer .mode .read .explain .maxrows .quit."""
from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Callable, Optional

import trdb
from trdb.api.formatting import MODES, format_rows
from trdb.storage.sql_text import quote_identifier

if TYPE_CHECKING:
    from trdb.api.runner import Runner

HELP = [
    (".help", "show this list"),
    (".tables", "list the tensors, views and tables"),
    (".schema [NAME]", "describe NAME (DESCRIBE NAME), or every tensor and view"),
    (".timer on|off", "print the time each statement takes"),
    (".mode [MODE]", "print results as " + ", ".join(MODES)),
    (".read FILE", "run the statements of FILE (stops at its first error)"),
    (".explain on|off", "print the plan of each query instead of running it (prefixes EXPLAIN)"),
    (".maxrows N", "show at most N rows of a table, first and last (0: all)"),
    (".quit", "leave the shell (also .exit and Ctrl-D)"),
]

LISTINGS = (("SHOW TENSORS", "tensor"), ("SHOW VIEWS", "view"), ("SHOW TABLES", "table"))


class CommandError(Exception):
    """A dot command used wrongly; the message says how to use it."""


class Quit(Exception):
    """.quit: leave the shell, or stop the batch."""


def relation_names(con: trdb.Connection) -> list[tuple[str, str]]:
    """(name, kind) of every tensor, view and plain table; a listing that fails is left out."""
    found, seen = [], set()
    for statement, kind in LISTINGS:
        try:
            rows = con.execute(statement).fetchall()
        except trdb.Error:
            continue
        for row in rows:
            if str(row[0]).lower() not in seen:
                seen.add(str(row[0]).lower())
                found.append((str(row[0]), kind))
    return found


def _help(runner: "Runner", args: list[str]) -> bool:
    width = max(len(name) for name, _ in HELP)
    lines = [f"{name.ljust(width)}  {text}" for name, text in HELP]
    lines.append("Statements end with ';' and may span lines. Ctrl-C cancels a running statement.")
    runner.message("\n".join(lines))
    return True


def _tables(runner: "Runner", args: list[str]) -> bool:
    names = sorted(relation_names(runner.con), key=lambda row: (row[1], row[0].lower()))
    runner.message(format_rows(["name", "kind"], names, runner.mode))
    return True


def _schema(runner: "Runner", args: list[str]) -> bool:
    if len(args) > 1:
        raise CommandError("usage: .schema [NAME]")
    if args:
        return runner.run_sql(f"DESCRIBE {quote_identifier(args[0])}")
    return runner.run_sql("SHOW TENSORS") and runner.run_sql("SHOW VIEWS")


def _switch(args: list[str], usage: str) -> bool:
    if len(args) != 1 or args[0].lower() not in ("on", "off"):
        raise CommandError(f"usage: {usage} on|off")
    return args[0].lower() == "on"


def _timer(runner: "Runner", args: list[str]) -> bool:
    runner.timer = _switch(args, ".timer")
    return True


def _explain(runner: "Runner", args: list[str]) -> bool:
    runner.explain = _switch(args, ".explain")
    return True


def _mode(runner: "Runner", args: list[str]) -> bool:
    if not args:
        runner.message(f"current mode: {runner.mode}")
        return True
    if len(args) != 1 or args[0].lower() not in MODES:
        raise CommandError(f"usage: .mode {'|'.join(MODES)}")
    runner.mode = args[0].lower()
    return True


def _maxrows(runner: "Runner", args: list[str]) -> bool:
    if len(args) != 1 or not args[0].isdigit():
        raise CommandError("usage: .maxrows N (0 shows every row)")
    runner.max_rows = int(args[0]) or None
    return True


def _read(runner: "Runner", args: list[str]) -> bool:
    if len(args) != 1:
        raise CommandError("usage: .read FILE")
    try:
        with open(args[0], encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise CommandError(f"cannot read {args[0]}: {exc.strerror}") from None
    return runner.run_script(text, args[0], bail=True) == 0


def _quit(runner: "Runner", args: list[str]) -> bool:
    raise Quit()


COMMANDS: dict[str, Callable[["Runner", list[str]], bool]] = {
    ".help": _help, ".tables": _tables, ".schema": _schema, ".timer": _timer, ".mode": _mode,
    ".read": _read, ".explain": _explain, ".maxrows": _maxrows, ".quit": _quit, ".exit": _quit,
}


def run_command(runner: "Runner", line: str, where: Optional[str] = None) -> bool:
    """Run one dot command line; prints a message and returns False when it is wrong."""
    try:
        words = shlex.split(line.rstrip(";"))  # a habit from SQL: `.tables;`
    except ValueError as exc:
        runner.error(CommandError(f"{line}: {exc}"), where)
        return False
    handler = COMMANDS.get(words[0].lower()) if words else None
    if handler is None:
        runner.error(CommandError(f'unknown command "{words[0] if words else line}"; .help lists the '
                                  "commands"), where)
        return False
    try:
        return handler(runner, words[1:])
    except CommandError as exc:
        runner.error(exc, where)
        return False
