"""The `trdb` command: run SQL given with -c, a batch file with -f, or read statements from stdin."""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence, TextIO

import trdb
from trdb.api.formatting import MODES, format_rows
from trdb.parser import split_statements


def _arguments(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="trdb", description="trdb, a tensor-relational database")
    parser.add_argument("database", nargs="?", default=None, help="database file (in memory when omitted)")
    parser.add_argument("-c", dest="command", help="run this SQL and exit")
    parser.add_argument("-f", dest="file", help="run the statements of this file and exit")
    parser.add_argument("--bail", action="store_true", help="stop at the first error (always so for -f)")
    parser.add_argument("--mode", choices=MODES, default="table", help="how results are printed")
    return parser.parse_args(argv)


def run_script(con: trdb.Connection, text: str, source: str, mode: str, out: TextIO, bail: bool) -> int:
    """Run each statement, printing results; returns the exit status (1 after an error)."""
    status = 0
    cur = con.cursor()
    for piece in split_statements(text):
        try:
            cur.execute(piece.text)
        except trdb.Error as exc:
            print(f"Error in {source}, line {piece.line}: {type(exc).__name__}: {exc}", file=sys.stderr)
            status = 1
            if bail:
                return status
            continue
        if cur.description:
            names = [d[0] for d in cur.description]
            print(format_rows(names, cur.fetchall(), mode), file=out)
    return status


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _arguments(argv)
    try:
        con = trdb.connect(args.database)
    except trdb.Error as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    try:
        if args.file:
            try:
                with open(args.file, encoding="utf-8") as handle:
                    text = handle.read()
            except OSError as exc:
                print(f"Error: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
                return 1
            return run_script(con, text, args.file, args.mode, sys.stdout, bail=True)
        if args.command is not None:
            return run_script(con, args.command, "-c", args.mode, sys.stdout, bail=args.bail)
        return run_script(con, sys.stdin.read(), "<stdin>", args.mode, sys.stdout, bail=args.bail)
    finally:
        con.commit()
        con.close()


if __name__ == "__main__":
    sys.exit(main())
