"""Relations over a named table, over files and over Python data: DuckDB's con.table, read_parquet, from_df."""
from __future__ import annotations

import itertools
import os
import re
import weakref
from typing import Any, Mapping, Sequence, Union

from trdb import errors
from trdb.api.relation import Relation
from trdb.api.replacement_scans import is_frame_like
from trdb.storage.sql_text import quote_identifier

_OPTION_NAME = re.compile(r"[^\W\d]\w*")
_frame_numbers = itertools.count(1)


def table_relation(connection, name: str) -> Relation:
    """The rows of a tensor, view or table: `SELECT * FROM name` (a dotted name is schema-qualified)."""
    if not isinstance(name, str) or not name.strip():
        raise errors.ProgrammingError("table() takes the name of a tensor, view or table",
                                      hint="con.table('A'); con.sql('SELECT ...') runs a query")
    query = "SELECT * FROM " + ".".join(quote_identifier(part) for part in name.split("."))
    return connection.sql(query)


def file_relation(connection, function: str, paths: Union[str, os.PathLike, Sequence], options: Mapping[str, Any]
                  ) -> Relation:
    """The rows DuckDB's table function `function` (read_parquet, read_csv) reads from a path, a glob or a
    list of them, `options` its named parameters. Only the columns are read now; each fetch reads the files."""
    source = f"{function}({_paths(function, paths)}{''.join(_option(function, k, v) for k, v in options.items())})"
    return lazy_relation(connection, f"SELECT * FROM {source}")


def frame_relation(connection, data: Any, what: str) -> Relation:
    """The rows of a pandas or polars DataFrame or Arrow data, registered under a name of its own for as long
    as the relation lives (as a DuckDB relation keeps its frame)."""
    if not is_frame_like(data):
        raise errors.ProgrammingError(f"{what}() takes a pandas or polars DataFrame or Arrow data, got "
                                      f"{type(data).__name__}", hint="con.sql('SELECT ...') reads SQL")
    name = f"trdb_frame_{next(_frame_numbers)}"
    connection.register(name, data)
    keep = _Registration(connection, name)
    return lazy_relation(connection, f"SELECT * FROM {quote_identifier(name)}", keep)


def lazy_relation(connection, query: str, keep: Any = None) -> Relation:
    """A relation whose query is not run yet: its columns come from running it with LIMIT 0."""
    described = connection.cursor().execute(f"{query} LIMIT 0")
    try:
        return Relation(connection, query, None, description=described.description, keep=keep)
    finally:
        described.close()


class _Registration:
    """A registered data frame; once the relation that reads it is gone, the connection unregisters it
    before its next statement."""

    def __init__(self, connection, name: str):
        self.name = name
        weakref.finalize(self, _release, weakref.ref(connection), name)


def _release(connection_ref, name: str) -> None:
    connection = connection_ref()
    if connection is not None:
        connection.released_frames.append(name)


def _paths(function: str, paths: Any) -> str:
    """One path, or a list of them, as a SQL literal."""
    if isinstance(paths, (str, os.PathLike)):
        return _literal(os.fspath(paths))
    if isinstance(paths, Sequence) and paths and all(isinstance(p, (str, os.PathLike)) for p in paths):
        return "[" + ", ".join(_literal(os.fspath(p)) for p in paths) + "]"
    raise errors.ProgrammingError(f"{function}() takes a path, a glob or a list of them, got {paths!r}")


def _option(function: str, name: str, value: Any) -> str:
    if not _OPTION_NAME.fullmatch(name):
        raise errors.ProgrammingError(f"{function}(): {name!r} is not an option name")
    return f", {name} = {_literal(value)}"


def _literal(value: Any) -> str:
    """A Python value as a SQL literal: text quoted (quotes doubled), booleans, numbers, lists, dicts (structs)."""
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "NULL"}[value]
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_literal(str(k))}: {_literal(v)}" for k, v in value.items()) + "}"
    raise errors.ProgrammingError(f"an option's value must be text, a number, a boolean, a list or a dict, "
                                  f"got {type(value).__name__}")
