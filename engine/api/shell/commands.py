"""The shell's dot commands, named and behaving as the duckdb CLI's: settings of the shell and the registry."""
from __future__ import annotations

import difflib
import shlex
from typing import TYPE_CHECKING, Callable, Optional

from trdb.api.shell import dot_files, pictures
from trdb.api.shell.formatting import MODES
from trdb.api.shell.registry import CommandError, Quit, known_relation, relation_names
from trdb.api.shell.schema_ddl import schema_statements
from trdb.storage.sql_text import quote_identifier

if TYPE_CHECKING:
    from trdb.api.shell.runner import Runner

HELP = [
    (".help", "show this list"),
    (".tables", "list the tensors, views and tables"),
    (".schema [NAME]", "the CREATE statements of NAME, or of every table, tensor and view (runnable as printed)"),
    (".show", "show the shell's settings"),
    (".mode [MODE]", "print results as " + ", ".join(MODES) + " (no MODE: the current one)"),
    (".headers on|off", "print the column names (table, box, duckbox, column, list, html, csv, tsv)"),
    (".maxrows [N]", "show at most N rows of a table, first and last (0: all; no N: the current value)"),
    (".timer on|off", "print the time each statement takes"),
    (".echo on|off", "print each statement and dot command before running it"),
    (".bail on|off", "stop a script at its first error"),
    (".explain on|off", "print the plan of each query instead of running it (prefixes EXPLAIN)"),
    (".output [FILE]", "send results to FILE (no FILE: back to standard output)"),
    (".once FILE", "send the next result to FILE"),
    (".read FILE", "run the statements of FILE (stops at its first error)"),
    (".import FILE NAME", "load a CSV file into table NAME (made when missing), or a .npy file as tensor NAME"),
    (".dump [NAME]", "print the SQL that re-creates the database (or one tensor, view or table)"),
    (".open [FILE]", "close this database and open FILE (no FILE: a new one in memory)"),
    (".shell CMD ...", "run a command of the operating system (also .system)"),
    (".print TEXT ...", "print the text"),
    (".spy TENSOR", "draw which tiles of a 2-d tensor are stored, and how dense each is"),
    (".plot spy TENSOR FILE.png", "write a PNG of a tensor's non-zeros (needs matplotlib: the plot extra)"),
    (".plot loss FILE.png", "write a PNG of the last MINIMIZE's loss curve (needs matplotlib: the plot extra)"),
    (".databases", "show the database file this shell has open"),
    (".quit", "leave the shell (also .q, .exit, \\q, quit, exit, quit(), exit() and Ctrl-D)"),
    ("\\d [NAME]", "psql's: list the relations, or describe NAME (also \\dt; \\l lists databases)"),
    ("\\timing, \\x", "psql's: toggle the timer, toggle expanded display (one line per column)"),
]

def _help(runner: "Runner", args: list[str]) -> bool:
    width = max(len(name) for name, _ in HELP)
    lines = [f"{name.ljust(width)}  {text}" for name, text in HELP]
    lines.append("Statements end with ';' and may span lines. Ctrl-C cancels a running statement.")
    runner.message("\n".join(lines))
    return True


def _tables(runner: "Runner", args: list[str]) -> bool:
    names = sorted(relation_names(runner.con), key=lambda row: (row[1], row[0].lower()))
    runner.print_rows(["name", "kind"], names)
    return True


def _schema(runner: "Runner", args: list[str]) -> bool:
    """sqlite3's .schema: the statements that make the schema again, to read into an empty database."""
    if len(args) > 1:
        raise CommandError("usage: .schema [NAME]")
    statements = schema_statements(runner.con, args[0] if args else None)
    if statements:
        runner.message("\n".join(statements))
    return True


def switch(args: list[str], usage: str) -> bool:
    """on|off (also true|false, 1|0, yes|no, as sqlite3 takes them)."""
    if len(args) != 1 or args[0].lower() not in ("on", "off", "true", "false", "1", "0", "yes", "no"):
        raise CommandError(f"usage: {usage} on|off")
    return args[0].lower() in ("on", "true", "1", "yes")


def _flag(name: str) -> Callable[["Runner", list[str]], bool]:
    def command(runner: "Runner", args: list[str]) -> bool:
        # psql's backslash-timing without an argument: a toggle, as psql's is
        setattr(runner, name, not getattr(runner, name) if args == ["toggle"] else switch(args, "." + name))
        return True

    return command


def _expanded(runner: "Runner", args: list[str]) -> bool:
    """psql's backslash-x: one line per column (mode line), or back to the mode before; on|off, or a toggle."""
    expanded = runner.mode == "line"
    wanted = (not expanded) if not args else switch(args, "\\x")
    if wanted and not expanded:
        runner.before_expanded, runner.mode = runner.mode, "line"
    elif not wanted and expanded:
        runner.mode = getattr(runner, "before_expanded", None) or "table"
    runner.message(f"Expanded display is {'on' if wanted else 'off'}.")
    return True


def _databases(runner: "Runner", args: list[str]) -> bool:
    """The database this shell has open, as the duckdb CLI's .databases and psql's backslash-l list theirs."""
    runner.print_rows(["name", "file"], [("main", runner.database or ":memory:")])
    return True


def _describe(runner: "Runner", args: list[str]) -> bool:
    """psql's backslash-d: the relations, or with a NAME its columns (DESCRIBE NAME)."""
    if len(args) > 1:
        raise CommandError("usage: \\d [NAME]")
    if not args:
        return _tables(runner, args)
    return runner.run_sql(f"DESCRIBE {quote_identifier(known_relation(runner.con, args[0]))}")


def _mode(runner: "Runner", args: list[str]) -> bool:
    if not args:
        runner.message(f"current output mode: {runner.mode}")
        return True
    if len(args) != 1 or args[0].lower() not in MODES:
        hint = close_word(args[0], MODES) if args else None
        raise CommandError(f"usage: .mode {'|'.join(MODES)}" + (f'\nHINT: did you mean "{hint}"?' if hint else ""))
    runner.mode = args[0].lower()
    return True


def _maxrows(runner: "Runner", args: list[str]) -> bool:
    if not args:
        runner.message(f"current max rows: {runner.max_rows or 0}")
        return True
    if len(args) != 1 or not args[0].isdigit():
        raise CommandError("usage: .maxrows [N] (0 shows every row)")
    runner.max_rows = int(args[0]) or None
    return True


def _show(runner: "Runner", args: list[str]) -> bool:
    on = lambda value: "on" if value else "off"
    rows = [("echo", on(runner.echo)), ("headers", on(runner.headers)), ("mode", runner.mode),
            ("maxrows", str(runner.max_rows or 0)), ("timer", on(runner.timer)), ("bail", on(runner.bail)),
            ("explain", on(runner.explain)), ("output", runner.output_name),
            ("database", runner.database or ":memory:")]
    width = max(len(name) for name, _ in rows)
    runner.message("\n".join(f"{name.rjust(width)}: {value}" for name, value in rows))
    return True


def _print(runner: "Runner", args: list[str]) -> bool:
    runner.message(" ".join(args))
    return True


def _quit(runner: "Runner", args: list[str]) -> bool:
    raise Quit()


def _commands() -> dict[str, Callable[["Runner", list[str]], bool]]:
    return {
        ".help": _help, ".tables": _tables, ".schema": _schema, ".timer": _flag("timer"), ".mode": _mode,
        ".read": dot_files.read, ".explain": _flag("explain"), ".maxrows": _maxrows, ".quit": _quit,
        ".exit": _quit, ".headers": _flag("headers"), ".echo": _flag("echo"), ".bail": _flag("bail"),
        ".show": _show, ".print": _print, ".output": dot_files.output, ".once": dot_files.once,
        ".import": dot_files.import_file, ".open": dot_files.open_database, ".dump": dot_files.dump,
        ".shell": dot_files.shell, ".system": dot_files.shell, ".spy": pictures.spy_command, ".plot": pictures.plot_command,
        ".q": _quit, ".databases": _databases,
        # psql's backslash commands, as its users type them
        "\\d": _describe, "\\d+": _describe, "\\dt": _tables, "\\dt+": _tables, "\\dv": _tables,
        "\\l": _databases, "\\timing": lambda runner, args: _flag("timer")(runner, args or ["toggle"]),
        "\\x": _expanded, "\\?": _help, "\\q": _quit,
    }


def _unknown(name: str, commands: dict) -> CommandError:
    """An unknown dot or backslash command: the closest known one of its kind as a hint, else .help."""
    close = close_word(name, [known for known in commands if known[0] == name[:1]])
    hint = f'did you mean "{close}"?' if close else ".help lists the commands (\\? too)"
    return CommandError(f'unknown command "{name}"\nHINT: {hint}')


def close_word(word: str, words) -> Optional[str]:
    """The known word a typo most likely meant (a letter or two off), or None."""
    close = difflib.get_close_matches(word.lower(), list(words), n=1, cutoff=0.7)
    return close[0] if close else None


COMMAND_NAMES = tuple(sorted({name.split()[0] for name, _ in HELP} | {".exit", ".system"}))


def run_command(runner: "Runner", line: str, where: Optional[str] = None) -> bool:
    """Run one dot command line; prints a message and returns False when it is wrong."""
    try:
        text = line.strip().rstrip(";")  # a habit from SQL: `.tables;`
        # shlex reads a backslash as an escape: psql's `\d name` keeps its backslash on the command's name
        words = ["\\" + w if i == 0 else w for i, w in enumerate(shlex.split(text[1:]))] if text.startswith("\\") \
            else shlex.split(text)
    except ValueError as exc:
        runner.error(CommandError(f"{line}: {exc}"), where)
        return False
    commands = _commands()
    handler = commands.get(words[0].lower()) if words else None
    if handler is None:
        runner.error(_unknown(words[0] if words else line.strip(), commands), where)
        return False
    try:
        return handler(runner, words[1:])
    except CommandError as exc:
        runner.error(exc, where)
        return False

