"""The `trdb` command: an interactive shell, or SQL given with -c, a batch file with -f, or statements on stdin."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from trdb.api.dbapi import Connection, connect
from trdb.api.shell.formatting import MODES
from trdb.api.shell.registry import Quit
from trdb.api.shell.runner import Cancelled, Runner
from trdb.api.shell.version import version
from trdb.errors import Error

INTERRUPTED = 130  # the shell convention for a run stopped by Ctrl-C (128 + SIGINT)


def _arguments(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="trdb", usage="trdb [DATABASE] [-c SQL]... [-cmd COMMAND]... [-f FILE] [-MODE] [options]",
        description="trdb, a tensor-relational database. Without -c or -f: an interactive "
        "shell when standard input is a terminal, else the statements read from standard input.",
        epilog='Example: trdb model.trdb -raw -c "EXPLAIN (FORMAT dot) SELECT * FROM A;" | dot -Tsvg > plan.svg')
    parser.add_argument("database", nargs="?", default=None, help="database file (in memory when omitted)")
    parser.add_argument("-c", dest="commands", action="append", metavar="SQL", help="run these statements (and "
                        "dot commands) and exit; given more than once, each runs in turn")
    parser.add_argument("-cmd", dest="before", action="append", default=[], metavar="COMMAND",
                        help="run COMMAND (statements or a dot command, e.g. -cmd '.mode csv') before the rest, "
                        "then go on as without it; may be given more than once")
    parser.add_argument("-f", dest="file", metavar="FILE", help="run the statements of FILE, stopping at the "
                        "first error, and exit")
    parser.add_argument("--bail", "-bail", action="store_true", help="with -c or standard input: stop at the "
                        "first error (-f always does)")
    parser.add_argument("--echo", "-echo", action="store_true", help="print each statement before running it")
    parser.add_argument("--noheader", "-noheader", dest="headers", action="store_false",
                        help="leave out the column names")
    parser.add_argument("--header", "-header", dest="headers", action="store_true", help="print the column names "
                        "(the default)")
    parser.add_argument("--version", "-version", action="version", version=f"trdb {version()}")
    _mode_arguments(parser)
    return parser.parse_args(argv)


def _mode_arguments(parser: argparse.ArgumentParser) -> None:
    """--mode MODE, and the duckdb CLI's single-dash spelling of each mode: -csv, -json, -raw, ..."""
    group = parser.add_argument_group("output modes (also .mode MODE in the shell)")
    group.add_argument("--mode", choices=list(MODES), default="table", metavar="MODE",
                       help="how results are printed: one of the modes below")
    for mode, text in MODES.items():
        group.add_argument(f"-{mode}", dest="mode", action="store_const", const=mode, help=text)


def _read_file(path: str, runner: Runner) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        print(f"Error: cannot read {path}: {reason}", file=runner.err)
        return None


def run(con: Connection, args: argparse.Namespace) -> int:
    """Run what the arguments ask for; the exit status. The connection (or the one .open put in its
    place) is committed and closed at the end."""
    interactive = args.file is None and args.commands is None and sys.stdin.isatty()
    runner = Runner(con, args.mode, interactive=interactive, database=args.database)
    runner.echo, runner.headers = args.echo, args.headers
    try:
        return _run(runner, args, interactive)
    finally:
        runner.close()


def _run(runner: Runner, args: argparse.Namespace, interactive: bool) -> int:
    try:
        status = 0
        for command in args.before:  # -cmd: before the rest, as in the duckdb CLI
            status |= runner.run_script(command, None, bail=args.bail)
            if status and args.bail:
                return status
        if args.file is not None:
            text = _read_file(args.file, runner)
            return 1 if text is None else runner.run_script(text, args.file, bail=True) | status
        if args.commands is not None:
            return _run_commands(runner, args.commands, args.bail) | status
        if not interactive:
            return runner.run_script(sys.stdin.read(), "<stdin>", bail=args.bail) | status
    except Quit:
        return 0
    except (Cancelled, KeyboardInterrupt):
        return INTERRUPTED
    from trdb.api.shell.repl import interact  # prompt_toolkit is loaded only for the interactive shell

    if "TRDB_PROGRESS" not in os.environ:
        runner.con.execute("SET progress = on")  # the shell shows progress on long statements
    runner.bail = args.bail
    return interact(runner, args.database)


def _run_commands(runner: Runner, commands: list[str], bail: bool) -> int:
    """Each -c in the order given; with --bail the first that fails ends the run."""
    status = 0
    for command in commands:
        status |= runner.run_script(command, None, bail=bail)
        if status and bail:
            break
    return status


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _arguments(argv)
    try:
        con = connect(args.database)
    except Error as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    try:
        return run(con, args)
    except BrokenPipeError:  # `trdb -c ... | head`: the reader left; nothing more can be written
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
