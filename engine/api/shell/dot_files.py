"""Dot commands that read or write files and databases: .read .output .once .import .open .dump .shell."""
from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING, Iterator

import numpy as np

from trdb.api.dbapi import Connection, connect
from trdb.api.shell.registry import CommandError, no_such_relation, relation_names
from trdb.api.shell.schema_ddl import duckdb_tables, duckdb_views, quote_literal, trdb_views
from trdb.errors import Error
from trdb.kernels.sparse import dense
from trdb.storage.sql_text import quote_identifier

if TYPE_CHECKING:
    from trdb.api.shell.runner import Runner


def read(runner: "Runner", args: list[str]) -> bool:
    if len(args) != 1:
        raise CommandError("usage: .read FILE")
    try:
        with open(args[0], encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"cannot read {args[0]}: {getattr(exc, 'strerror', None) or 'not UTF-8 text'}") from None
    return runner.run_script(text, args[0], bail=True) == 0


def output(runner: "Runner", args: list[str]) -> bool:
    if len(args) > 1:
        raise CommandError("usage: .output [FILE]")
    runner.redirect(args[0] if args else None, once=False)
    return True


def once(runner: "Runner", args: list[str]) -> bool:
    if len(args) != 1:
        raise CommandError("usage: .once FILE")
    runner.redirect(args[0], once=True)
    return True


def shell(runner: "Runner", args: list[str]) -> bool:
    """.shell CMD ...: run through the system's shell, as the duckdb CLI does (pipes and globs work)."""
    if not args:
        raise CommandError("usage: .shell COMMAND [ARGUMENT ...]")
    runner.out.flush()
    done = subprocess.run(" ".join(args), shell=True, capture_output=True, text=True, check=False)
    if done.stdout:
        runner.message(done.stdout.rstrip("\n"))
    if done.stderr:
        runner.message(done.stderr.rstrip("\n"), runner.err)
    return done.returncode == 0


def import_file(runner: "Runner", args: list[str]) -> bool:
    """.import FILE NAME: a CSV file into a table (appended to one that exists), a .npy file as a tensor."""
    if len(args) != 2:
        raise CommandError("usage: .import FILE NAME")
    path, name = args
    kinds = {n.lower(): kind for n, kind in relation_names(runner.con)}
    if path.lower().endswith(".npy"):
        return runner.run_sql(f"CREATE TENSOR {quote_identifier(name)} FROM {quote_literal(path)} TILE ({_tile(path)})")
    if kinds.get(name.lower()) not in (None, "table"):
        raise CommandError(f'"{name}" is a {kinds[name.lower()]}: .import loads CSV files into tables')
    source = f"read_csv({quote_literal(path)})"
    if name.lower() in kinds:
        return runner.run_sql(f"INSERT INTO {quote_identifier(name)} SELECT * FROM {source}")
    return runner.run_sql(f"CREATE TABLE {quote_identifier(name)} AS SELECT * FROM {source}")


def _tile(path: str) -> str:
    """Tiles of at most 1024 along each dimension of the .npy file (its header read, not its data)."""
    try:
        shape = np.load(path, mmap_mode="r", allow_pickle=False).shape
    except (OSError, ValueError) as exc:
        raise CommandError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return ", ".join(str(max(1, min(n, 1024))) for n in shape) or "1"


def open_database(runner: "Runner", args: list[str]) -> bool:
    """.open [FILE]: the old database is committed and closed; no FILE opens a new one in memory."""
    if len(args) > 1:
        raise CommandError("usage: .open [FILE]")
    try:
        con = connect(args[0] if args else None)
    except Error as exc:
        raise CommandError(f"cannot open {args[0] if args else 'a database in memory'}: {exc}") from None
    runner.replace_connection(con, args[0] if args else None)
    return True


def dump(runner: "Runner", args: list[str]) -> bool:
    """.dump [NAME]: statements that re-create the tables, tensors (their non-zeros) and views."""
    if len(args) > 1:
        raise CommandError("usage: .dump [NAME]")
    names = relation_names(runner.con)
    if args:
        names = [(n, kind) for n, kind in names if n.lower() == args[0].lower()]
        if not names:
            raise no_such_relation(runner.con, args[0])
    order = {"table": 0, "tensor": 1, "view": 2}  # a tensor may come from a table, a view reads both
    lines = []
    for name, kind in sorted(names, key=lambda item: order[item[1]]):
        lines += list({"table": _table, "tensor": _tensor, "view": _view}[kind](runner.con, name))
    runner.message("\n".join(lines))
    return True


def _literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, float, np.number)):
        return repr(float(value)) if isinstance(value, (float, np.floating)) else str(value)
    return quote_literal(str(value))


def _table(con: Connection, name: str) -> Iterator[str]:
    ddl = [sql for table, sql in duckdb_tables(con) if table.lower() == name.lower()]
    yield ddl[0] if ddl else f"-- table {name}: no definition found"
    for row in con.execute(f"SELECT * FROM {quote_identifier(name)}").fetchall():
        yield f"INSERT INTO {quote_identifier(name)} VALUES ({', '.join(_literal(v) for v in row)});"


def _view(con: Connection, name: str) -> Iterator[str]:
    yield from (sql for view, sql in trdb_views(con) + duckdb_views(con) if view.lower() == name.lower())


def _tensor(con: Connection, name: str) -> Iterator[str]:
    """A tensor as a table of its non-zeros, read back with FROM COO (the table is dropped after)."""
    info = {row[0].lower(): row for row in con.execute("SHOW TENSORS").fetchall()}[name.lower()]
    keys = [k.strip() for k in info[1].split(",")]
    shape, tile, dtype = _ints(info[2]), _ints(info[3]), info[4]
    staging, quoted = quote_identifier(f"{name}__dump"), quote_identifier(name)
    columns = ", ".join(quote_identifier(k) for k in keys)
    entries = list(_entries(con, quoted, tile))
    yield f"CREATE TABLE {staging} ({', '.join(f'{quote_identifier(k)} BIGINT' for k in keys)}, v DOUBLE);"
    for start in range(0, len(entries), 500):
        values = ", ".join("(" + ", ".join(map(str, e[:-1])) + f", {e[-1]!r})" for e in entries[start:start + 500])
        yield f"INSERT INTO {staging} VALUES {values};"
    yield (f"CREATE TENSOR {quoted} ({columns}) FROM COO {staging} ({columns}, v) SHAPE ({', '.join(map(str, shape))})"
           f" TILE ({', '.join(map(str, tile))}) DTYPE {dtype};")
    yield f"DROP TABLE {staging};"


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.strip("[]() ").split(",") if part.strip()]


def _entries(con: Connection, quoted: str, tile: list[int]) -> Iterator[tuple]:
    for row in con.execute(f"SELECT * FROM {quoted}").fetchall():
        values = np.asarray(dense(row[-1]))
        for local in zip(*np.nonzero(values)):
            at = tuple(int(k) * t + int(i) for k, t, i in zip(row[:-1], tile, local))
            yield at + (values[local].item(),)
