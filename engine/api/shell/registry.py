"""What the shell's commands share: their errors, and the names of the database's relations."""
from __future__ import annotations

from trdb.api.dbapi import Connection
from trdb.errors import Error, did_you_mean

LISTINGS = (("SHOW TENSORS", "tensor"), ("SHOW VIEWS", "view"), ("SHOW TABLES", "table"))


class CommandError(Exception):
    """A dot command used wrongly; the message says how to use it."""


class Quit(Exception):
    """.quit: leave the shell, or stop the batch."""


def relation_names(con: Connection) -> list[tuple[str, str]]:
    """(name, kind) of every tensor, view and plain table; a listing that fails is left out."""
    found, seen = [], set()
    for statement, kind in LISTINGS:
        try:
            rows = con.execute(statement).fetchall()
        except Error:
            continue
        for row in rows:
            if str(row[0]).lower() not in seen:
                seen.add(str(row[0]).lower())
                # SHOW TABLES says what each is: a DuckDB view is a view, not a table
                found.append((str(row[0]), str(row[1]) if kind == "table" and row[1:2] in (("view",), ("tensor",))
                              else kind))
    return found


def no_such_relation(con: Connection, name: str) -> CommandError:
    """The error for a name that is no tensor, view or table, with the closest one as a hint."""
    hint = did_you_mean(name, [n for n, _ in relation_names(con)]) or ".tables (or \\d) lists them"
    return CommandError(f'no tensor, view or table is named "{name}"\nHINT: {hint}')


def known_relation(con: Connection, name: str) -> str:
    """The name as the database spells it; a CommandError with a hint when there is none."""
    for known, _ in relation_names(con):
        if known.lower() == name.lower():
            return known
    raise no_such_relation(con, name)
