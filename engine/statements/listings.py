"""SHOW TABLES, SHOW ALL TABLES and SHOW ALL: the user's objects and trdb's settings, never trdb's internals.

trdb's catalog schema `_trdb` (tile tables, catalog tables) and optimizer state tensors (Adam's
`__trdb_adam_m__W`, `__trdb_adam_v__W`, listed by DESCRIBE W) are left out; `information_schema` stays as DuckDB has it.
"""
from __future__ import annotations

from typing import Any

from trdb.catalog.names import fold
from trdb.config.settings import SETTINGS
from trdb.errors import Error
from trdb.execution.result import Result
from trdb.parser import ast
from trdb.plan.types import Column, OtherType
from trdb.statements.context import StatementContext
from trdb.statements.names import state_owner
from trdb.storage.ordinary_tables import current_database, ordinary_table_listing, ordinary_views

VARCHAR, LIST, BOOLEAN = OtherType("VARCHAR"), OtherType("VARCHAR[]"), OtherType("BOOLEAN")


def listing(names: tuple[str, ...], rows: list[tuple], types: tuple = ()) -> Result:
    schema = tuple(Column(n, types[i] if i < len(types) else VARCHAR) for i, n in enumerate(names))
    return Result(rows=rows, schema=schema, rowcount=len(rows))


def shown(value: Any) -> str:
    """A setting's value as SHOW prints it (booleans as on/off, as PostgreSQL does)."""
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


def _user_relations(sc: StatementContext) -> list[tuple[str, str, list[str], list[str]]]:
    """(name, kind, column names, column types) of each tensor and trdb view the user made."""
    found = []
    for meta in sc.catalog.tensors():
        if state_owner(sc.catalog, meta.name) is None:
            found.append((meta.name, "tensor", [*meta.keys, meta.value_name],
                          ["BIGINT"] * len(meta.keys) + [f"TENSOR({meta.dtype.name})"]))
    for name, _ in sc.catalog.views():
        try:
            schema = sc.bind_table(ast.TableRef(name)).schema
        except Error:  # a view whose tensors are gone is still listed
            schema = ()
        found.append((name, "view", [c.name for c in schema], [str(c.type) for c in schema]))
    return found


def show_tables(sc: StatementContext, node: ast.ShowTables) -> Result:
    """Every tensor, view and table, by name, with its kind (DuckDB lists `name` only: tables alone)."""
    if node.all:
        return show_all_tables(sc, node)
    rows = [(name, kind) for name, kind, _, _ in _user_relations(sc)]
    views = ordinary_views(sc.db) if sc.catalog.ordinary_tables() else set()
    rows += [(name, "view" if name in views else "table") for name in sc.catalog.ordinary_tables()]
    return listing(("name", "kind"), sorted(rows, key=lambda row: fold(row[0])))


def show_all_tables(sc: StatementContext, node) -> Result:
    """DuckDB's SHOW ALL TABLES columns, with the tensors and trdb views added and a `kind` column."""
    database = current_database(sc.db)
    views = ordinary_views(sc.db)
    rows = [(database, "main", name, columns, types, False, kind)
            for name, kind, columns, types in _user_relations(sc)]
    for db_name, schema, name, columns, types, temporary in ordinary_table_listing(sc.db):
        rows.append((db_name, schema, name, columns, types, temporary, "view" if name in views else "table"))
    rows.sort(key=lambda row: (row[0], row[1], fold(row[2])))
    return listing(("database", "schema", "name", "column_names", "column_types", "temporary", "kind"), rows,
                   (VARCHAR, VARCHAR, VARCHAR, LIST, LIST, BOOLEAN, VARCHAR))


def show_all(sc: StatementContext, node) -> Result:
    """trdb's settings in force, with what each means (as DuckDB's duckdb_settings() and PostgreSQL's SHOW ALL)."""
    rows = [(name, shown(sc.settings.get(name)), setting.meaning) for name, setting in sorted(SETTINGS.items())]
    return listing(("name", "value", "description"), rows)
