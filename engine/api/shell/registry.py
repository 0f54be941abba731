"""What the shell's commands share: their errors, and the names of the database's relations."""
from __future__ import annotations

from trdb.api.dbapi import Connection
from trdb.errors import Error

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
                found.append((str(row[0]), kind))
    return found
