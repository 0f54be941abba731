"""EXPORT / IMPORT DATABASE for ordinary tables and DuckDB views: their SQL, and their rows as Parquet files."""
from __future__ import annotations

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

