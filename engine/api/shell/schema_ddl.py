"""The statements that re-create a database's schema without its data (.schema): sequences, tables, tensors,
indexes and views, in an order in which they run on an empty database."""
from __future__ import annotations

import re
from typing import Optional

from trdb.api.dbapi import Connection
from trdb.api.shell.registry import no_such_relation
from trdb.storage.sql_text import quote_identifier

HERE = "schema_name = 'main' AND database_name = current_database()"  # trdb's own tables are in _trdb
KEPT = f"{HERE} AND NOT internal AND NOT temporary"


def schema_statements(con: Connection, name: Optional[str] = None) -> list[str]:
    """Every CREATE statement of the schema, or those of one relation (a table's indexes come with it)."""
    if name is not None:
        return _one(con, name)
    views = _in_reading_order(duckdb_views(con) + trdb_views(con))
    return ([sql for _, sql in _sequences(con)] + [sql for _, sql in duckdb_tables(con)] + tensor_statements(con)
            + [sql for _, sql in _indexes(con)] + [sql for _, sql in views])


def _one(con: Connection, name: str) -> list[str]:
    fold = name.lower()
    tables = [sql for table, sql in duckdb_tables(con) if table.lower() == fold]
    indexes = [sql for table, sql in _indexes(con) if table.lower() == fold]
    views = [sql for view, sql in duckdb_views(con) + trdb_views(con) if view.lower() == fold]
    found = tables + indexes + views + tensor_statements(con, fold)
    if not found:
        raise no_such_relation(con, name)
    return found


def _rows(con: Connection, sql: str) -> list[tuple[str, str]]:
    return [(str(a), str(b).strip()) for a, b in con.execute(sql).fetchall()]


def duckdb_tables(con: Connection) -> list[tuple[str, str]]:
    """(name, CREATE TABLE) of the plain DuckDB tables (a tensor's tiles are kept elsewhere)."""
    return _rows(con, f"SELECT table_name, sql FROM duckdb_tables() WHERE {KEPT} ORDER BY table_oid")


def duckdb_views(con: Connection) -> list[tuple[str, str]]:
    """(name, CREATE VIEW) of the views DuckDB keeps (those that read only plain tables)."""
    return _rows(con, f"SELECT view_name, sql FROM duckdb_views() WHERE {KEPT} ORDER BY view_oid")


def trdb_views(con: Connection) -> list[tuple[str, str]]:
    """(name, CREATE VIEW) of trdb's views (those that read tensors)."""
    return [(str(view), f"CREATE VIEW {quote_identifier(str(view))} AS {str(query).strip().rstrip(';')};")
            for view, query in con.execute("SHOW VIEWS").fetchall()]


def _sequences(con: Connection) -> list[tuple[str, str]]:
    return _rows(con, f"SELECT sequence_name, sql FROM duckdb_sequences() WHERE {HERE} AND NOT temporary ORDER BY sequence_oid")


def _indexes(con: Connection) -> list[tuple[str, str]]:
    """(table, CREATE INDEX) of the indexes made with CREATE INDEX (a key's own index has no statement)."""
    rows = con.execute(f"SELECT table_name, sql FROM duckdb_indexes() WHERE {HERE} "
                       "AND sql IS NOT NULL ORDER BY index_oid").fetchall()
    return [(str(table), str(sql).strip()) for table, sql in rows]


def tensor_statements(con: Connection, fold: Optional[str] = None) -> list[str]:
    """CREATE TENSOR of every tensor (or the one whose lower-case name is fold): keys, shape, tile, dtype and
    an external tensor's LOCATION; no FILL, so the tensor is made empty."""
    cursor = con.execute("SHOW TENSORS")
    columns = [d[0] for d in cursor.description]
    tensors = [dict(zip(columns, row)) for row in cursor.fetchall()]
    return [_create_tensor(t) for t in tensors if fold is None or str(t["name"]).lower() == fold]


def _create_tensor(tensor: dict) -> str:
    keys = [k.strip() for k in str(tensor["keys"]).split(",") if k.strip()]
    text = f"CREATE TENSOR {quote_identifier(str(tensor['name']))}"
    text += f" ({', '.join(quote_identifier(k) for k in keys)})" if keys else ""
    text += f" SHAPE ({_list(tensor['shape'])}) TILE ({_list(tensor['tile'])}) DTYPE {tensor['dtype']}"
    location = tensor.get("location")
    return text + (f" LOCATION {quote_literal(str(location))}" if location else "") + ";"


def quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _list(text) -> str:
    return ", ".join(part.strip() for part in str(text).strip("[]() ").split(",") if part.strip())


def _in_reading_order(views: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Views after the views they read (a view's name in another's text counts as read); a circle keeps its order."""
    left, ordered = list(views), []
    while left:
        ready = [v for v in left if not any(o is not v and _mentions(v[1], o[0]) for o in left)] or left[:1]
        ordered += ready
        left = [v for v in left if v not in ready]
    return ordered


def _mentions(sql: str, name: str) -> bool:
    body = re.split(r"\sAS\s", sql, maxsplit=1, flags=re.I)[-1]  # the view's own name is before AS
    return re.search(rf'(?<![\w"]){re.escape(name)}(?![\w"])|"{re.escape(name)}"', body, re.I) is not None
