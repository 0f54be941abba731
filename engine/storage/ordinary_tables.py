"""Plain SQL tables and views outside trdb's schema: their columns, their rows and their estimated sizes."""
from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa

from trdb.storage.catalog_format import SCHEMA
from trdb.storage.database import Database
from trdb.storage.sql_text import quote_identifier


def ordinary_tables(db: Database) -> dict[str, list[tuple[str, str]]]:
    """Plain SQL tables and views outside trdb's schema: name -> [(column, DuckDB type)]."""
    rows = db.execute("SELECT table_name, column_name, data_type FROM information_schema.columns "
                      f"WHERE table_schema NOT IN ('{SCHEMA}', 'information_schema', 'pg_catalog') "
                      "ORDER BY table_name, ordinal_position")
    tables: dict[str, list[tuple[str, str]]] = {}
    for table, column, data_type in rows:
        tables.setdefault(table, []).append((column, data_type))
    return tables


def ordinary_views(db: Database) -> set[str]:
    """The names of DuckDB views outside trdb's schema (ordinary_tables lists them beside the tables)."""
    rows = db.execute("SELECT table_name FROM information_schema.tables WHERE table_type = 'VIEW' "
                      f"AND table_schema NOT IN ('{SCHEMA}', 'information_schema', 'pg_catalog')")
    return {name for (name,) in rows}


def ordinary_table_listing(db: Database) -> list[tuple]:
    """DuckDB's SHOW ALL TABLES without trdb's own schema: (database, schema, name, column_names,
    column_types, temporary) per plain table or view."""
    return db.execute(f"SELECT * FROM (SHOW ALL TABLES) WHERE schema <> '{SCHEMA}' ORDER BY database, schema, name")


def current_database(db: Database) -> str:
    return db.execute("SELECT current_database()")[0][0]


def read_ordinary_table(db: Database, table: str, columns: tuple[str, ...]) -> list[tuple]:
    """Every row of an ordinary table, only the named columns, in that order."""
    names = ", ".join(quote_identifier(c) for c in columns)
    return db.execute(f"SELECT {names} FROM {quote_identifier(table)}")


def read_integer_columns(db: Database, table: str, columns: tuple[str, ...]) -> Optional[list[np.ndarray]]:
    """The named columns of an ordinary table as int64 arrays, where every one is an integer column without
    NULLs; None otherwise (the rows are then read as tuples)."""
    names = ", ".join(quote_identifier(c) for c in columns)
    read = db.arrow(f"SELECT {names} FROM {quote_identifier(table)}")
    if not columns or any(not pa.types.is_integer(c.type) or c.null_count for c in read.columns):
        return None
    arrays = [c.to_numpy().astype(np.int64, copy=False) for c in read.columns]
    if any(c.type == pa.uint64() and len(a) and int(a.min()) < 0 for c, a in zip(read.columns, arrays)):
        return None  # beyond int64: as Python ints
    return arrays


def integer_ranges(db: Database, table: str, columns: tuple[str, ...]) -> dict[str, int]:
    """How many values lie between the least and greatest of each integer column named (a bound on its distinct
    values, for join estimates; a million rows take milliseconds); NULL-only and other columns are left out."""
    types = dict(ordinary_tables(db).get(table, []))
    wanted = [c for c in columns if types.get(c, "").upper() in _INTEGER_TYPES]
    if not wanted:
        return {}
    found = db.execute("SELECT " + ", ".join(f"min({quote_identifier(c)}), max({quote_identifier(c)})" for c in wanted)
                       + f" FROM {quote_identifier(table)}")[0]
    return {c: int(high) - int(low) + 1 for c, low, high in zip(wanted, found[::2], found[1::2])
            if low is not None}


_INTEGER_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
                  "UBIGINT", "UHUGEINT"}


def estimated_rows(db: Database, table: str) -> Optional[int]:
    """DuckDB's estimate of an ordinary table's row count; None for a view or a table it has no estimate of."""
    found = db.execute("SELECT estimated_size FROM duckdb_tables() WHERE table_name = ?", [table])
    return found[0][0] if found else None
