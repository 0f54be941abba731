"""The module's own connection, as DuckDB's: trdb.sql(), trdb.execute(), trdb.table()... on one in-memory database."""
from __future__ import annotations

import threading
from typing import Any, Mapping, Optional, Sequence, Union

from trdb.api.dbapi import Connection, Cursor, connect
from trdb.api.relation import Relation

_lock = threading.Lock()
_default: Optional[Connection] = None

Parameters = Optional[Union[Sequence[Any], Mapping[str, Any]]]


def default_connection() -> Connection:
    """The connection module-level calls use (an in-memory database, opened at first use, and again once
    closed), as duckdb.default_connection()."""
    global _default
    with _lock:
        if _default is None or _default.closed:
            _default = connect()
        return _default


def _chosen(connection: Optional[Connection]) -> Connection:
    return connection if connection is not None else default_connection()


def sql(query: str, params: Parameters = None, *, connection: Optional[Connection] = None) -> Optional[Relation]:
    """As duckdb.sql: con.sql() on the default connection (or `connection`)."""
    return _chosen(connection).sql(query, params)


query = sql


def execute(operation: str, parameters: Parameters = None, *, connection: Optional[Connection] = None) -> Cursor:
    """As duckdb.execute: a cursor of the default connection (or `connection`) that has run the statement."""
    return _chosen(connection).execute(operation, parameters)


def executemany(operation: str, seq_of_parameters: Sequence[Any], *, connection: Optional[Connection] = None
                ) -> Cursor:
    return _chosen(connection).executemany(operation, seq_of_parameters)


def table(name: str, *, connection: Optional[Connection] = None) -> Relation:
    return _chosen(connection).table(name)


def read_parquet(file_glob: Union[str, Sequence[str]], *, connection: Optional[Connection] = None,
                 **options: Any) -> Relation:
    return _chosen(connection).read_parquet(file_glob, **options)


def read_csv(path: Union[str, Sequence[str]], *, connection: Optional[Connection] = None, **options: Any) -> Relation:
    return _chosen(connection).read_csv(path, **options)


def from_df(df: Any, *, connection: Optional[Connection] = None) -> Relation:
    return _chosen(connection).from_df(df)


def from_arrow(data: Any, *, connection: Optional[Connection] = None) -> Relation:
    return _chosen(connection).from_arrow(data)
