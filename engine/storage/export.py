"""EXPORT / IMPORT DATABASE for ordinary tables and DuckDB views: their SQL, and their rows as Parquet files."""
from __future__ import annotations

import os
from typing import Optional

from trdb.storage.catalog_format import SCHEMA
from trdb.storage.database import Database
from trdb.storage.sql_text import quote_identifier


def quote_literal(text: str) -> str:
    """A string literal DuckDB reads back as `text` (a file path: COPY TO takes no parameter)."""
    if "\x00" in text:
        raise ValueError("a path cannot hold a NUL character")
    return "'" + text.replace("'", "''") + "'"


def ordinary_tables(db: Database) -> list[tuple[str, str]]:
    """(name, CREATE TABLE statement) of the tables in the main schema, in creation order."""
    return [(name, sql) for name, sql in db.execute(
        "SELECT table_name, sql FROM duckdb_tables() WHERE database_name = current_database() AND "
        "schema_name = 'main' AND NOT temporary ORDER BY table_oid")]


def ordinary_views(db: Database) -> list[tuple[str, str]]:
    return [(name, sql) for name, sql in db.execute(
        "SELECT view_name, sql FROM duckdb_views() WHERE database_name = current_database() AND "
        "schema_name = 'main' AND NOT internal AND NOT temporary ORDER BY view_oid")]


def export_table(db: Database, table: str, path: str) -> None:
    db.execute(f"COPY (SELECT * FROM main.{quote_identifier(table)}) TO {quote_literal(path)} (FORMAT parquet)")


def import_table(db: Database, create_sql: str, table: str, path: str) -> None:
    """Create an exported table again from its own CREATE statement and load its rows."""
    _check_create(create_sql, "TABLE")
    db.execute(create_sql)
    db.execute(f"INSERT INTO main.{quote_identifier(table)} SELECT * FROM read_parquet(?)", [path])


def import_view(db: Database, create_sql: str) -> None:
    _check_create(create_sql, "VIEW")
    db.execute(create_sql)


def _check_create(sql: str, kind: str) -> None:
    """An export's catalog file is user input: run only one CREATE of the expected kind, outside trdb's schema."""
    import duckdb  # the parser DuckDB itself uses, to tell what the text holds

    statements = duckdb.extract_statements(sql)
    words = sql.split()
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.CREATE or \
            kind not in (w.upper() for w in words[:4]) or SCHEMA.lower() in sql.lower():
        raise ValueError(f"not a CREATE {kind} statement: {sql[:80]!r}")


def file_access_refusal(db: Database, path: str) -> Optional[str]:
    """Why DuckDB's own COPY would refuse `path` under its settings (enable_external_access = false and the
    allowed directories and paths), or None: trdb's COPY writes with pyarrow and must refuse the same."""
    if db.execute("SELECT current_setting('enable_external_access')")[0][0]:
        return None  # the usual case, asked alone: an external tensor's scan asks at every read
    directories, paths = db.execute(
        "SELECT current_setting('allowed_directories'), current_setting('allowed_paths')")[0]
    full = os.path.abspath(path)
    if full in {os.path.abspath(p) for p in paths or ()}:
        return None
    for directory in directories or ():
        if (full + os.sep).startswith(os.path.join(os.path.abspath(directory), "")):
            return None
    return f'Cannot access file "{path}" - file system operations are disabled by configuration'
