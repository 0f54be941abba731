"""The catalog's format version, stored in the file: new databases are created at it, older ones upgraded.

Format 1 is every database written before the version was stored (it has no `_trdb.format` table);
format 2 adds the data version of each tensor (`tensors.data_version`, from the `data_versions`
sequence), which lets connections to one file share cached tiles safely; format 3 adds the location
of an external tensor (`tensors.location`; NULL for a tensor whose tiles are in the database); format 4
adds the table small tensors share (`small_tiles`, see storage/small_tiles.py) and keeps Adam's step
count of each parameter in its catalog row (`tensors.adam_step`, written with the data version a MINIMIZE
step sets anyway; the `adam_steps` table of older formats, made at a file's first MINIMIZE, is moved there
and is now a view of those counts).
"""
from __future__ import annotations

import re
from typing import Callable

from trdb.errors import OperationalError
from trdb.storage.database import Database

SCHEMA = "_trdb"
FORMAT_VERSION = 4
SMALL_TILES = f"{SCHEMA}.small_tiles"
SMALL_TILE_TABLE = re.compile(r"_trdb\.small_[0-9]{1,18}")  # a tensor whose one tile is a row of SMALL_TILES
_SMALL_TILES_TABLE = f"{SMALL_TILES} (owner BIGINT NOT NULL, nnz BIGINT NOT NULL, v BLOB NOT NULL, fmt TINYINT DEFAULT 0)"
_ADAM_STEPS_VIEW = (f"{SCHEMA}.adam_steps AS SELECT name AS param, adam_step AS step FROM {SCHEMA}.tensors "
                    "WHERE adam_step IS NOT NULL")


def ensure_schema(db: Database) -> None:
    """Create the catalog of a new database, or upgrade an older one; refuse one from a newer trdb."""
    if not schema_exists(db):
        if not db.read_only:
            with db.statement():
                _create(db)
        return
    tables = _columns(db)
    found = stored_version(db, tables)
    if found > FORMAT_VERSION:
        raise OperationalError(f"the database was written by a newer trdb (catalog format {found}; this trdb "
                               f"reads formats up to {FORMAT_VERSION})", hint="upgrade trdb: pip install -U trdb")
    if found < FORMAT_VERSION:
        if db.read_only:
            raise OperationalError(f"the database has catalog format {found}, older than this trdb's "
                                   f"{FORMAT_VERSION}, and is open read-only, so it cannot be upgraded",
                                   hint="open it once without read_only=True: it is upgraded in place")
        with db.statement():  # all steps or none
            for version in range(found + 1, FORMAT_VERSION + 1):
                _MIGRATIONS[version](db)
            _set_version(db, FORMAT_VERSION)


def schema_exists(db: Database) -> bool:
    """Whether trdb's catalog schema is there (a read-only database trdb never wrote has none)."""
    return bool(db.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = ?", [SCHEMA]))


def stored_version(db: Database, tables: dict[str, list[str]]) -> int:
    """The catalog's format; `tables`: the columns of each table of trdb's schema (`_columns`)."""
    if not tables.get("format"):
        return 1
    rows = db.execute(f"SELECT max(version) FROM {SCHEMA}.format")
    version = rows[0][0] if rows else None
    if not isinstance(version, int) or version < 1:
        raise OperationalError(f"the database's catalog format ({version!r}) is not one trdb wrote",
                               hint="the file is damaged, or was not written by trdb")
    return version


_TENSORS = f"""{SCHEMA}.tensors (
        name VARCHAR PRIMARY KEY, keys VARCHAR, value_name VARCHAR, dtype VARCHAR, shape VARCHAR,
        tile VARCHAR, tile_table VARCHAR, tuple_count BIGINT, nnz BIGINT, csr_tuples BIGINT DEFAULT 0,
        csr_nnz BIGINT DEFAULT 0, distinct_keys VARCHAR DEFAULT NULL, data_version BIGINT DEFAULT 0,
        location VARCHAR DEFAULT NULL, adam_step BIGINT DEFAULT NULL)"""


def _create(db: Database) -> None:
    db.execute(f"CREATE SCHEMA {SCHEMA}")
    db.execute(f"CREATE TABLE {_TENSORS}")
    db.execute(f"CREATE TABLE {SCHEMA}.views (name VARCHAR PRIMARY KEY, query VARCHAR)")
    db.execute(f"CREATE SEQUENCE {SCHEMA}.tile_table_ids")
    db.execute(f"CREATE SEQUENCE {SCHEMA}.data_versions START 1")
    db.execute(f"CREATE TABLE {SCHEMA}.format (version INTEGER)")
    db.execute(f"CREATE VIEW {_ADAM_STEPS_VIEW}")
    db.execute(f"CREATE TABLE {_SMALL_TILES_TABLE}")
    _set_version(db, FORMAT_VERSION)


def _set_version(db: Database, version: int) -> None:
    db.execute(f"DELETE FROM {SCHEMA}.format")
    db.execute(f"INSERT INTO {SCHEMA}.format VALUES (?)", [version])


def _columns(db: Database) -> dict[str, list[str]]:
    rows = db.execute("SELECT table_name, list(column_name) FROM information_schema.columns "
                      "WHERE table_schema = ? GROUP BY table_name", [SCHEMA])
    return {table: columns for table, columns in rows}


def _to_format_2(db: Database) -> None:
    """Format 1 covers every earlier layout: columns added over time are added here if missing."""
    db.execute(f"CREATE TABLE IF NOT EXISTS {_TENSORS}")
    db.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.views (name VARCHAR PRIMARY KEY, query VARCHAR)")
    db.execute(f"CREATE SEQUENCE IF NOT EXISTS {SCHEMA}.tile_table_ids")
    for table, columns in _columns(db).items():
        if table == "tensors":
            for column, declaration in (("csr_tuples", "BIGINT DEFAULT 0"), ("csr_nnz", "BIGINT DEFAULT 0"),
                                        ("distinct_keys", "VARCHAR DEFAULT NULL"),
                                        ("data_version", "BIGINT DEFAULT 0")):
                if column not in columns:
                    db.execute(f"ALTER TABLE {SCHEMA}.tensors ADD COLUMN {column} {declaration}")
        elif table.startswith("tiles_") and table[6:].isdigit() and "fmt" not in columns:
            db.execute(f"ALTER TABLE {SCHEMA}.{table} ADD COLUMN fmt TINYINT DEFAULT 0")
    db.execute(f"CREATE SEQUENCE IF NOT EXISTS {SCHEMA}.data_versions START 1")
    db.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.format (version INTEGER)")


def _to_format_3(db: Database) -> None:
    """External tensors: where their Parquet dataset is (NULL for every tensor an older trdb wrote)."""
    if "location" not in _columns(db).get("tensors", []):
        db.execute(f"ALTER TABLE {SCHEMA}.tensors ADD COLUMN location VARCHAR DEFAULT NULL")


def _to_format_4(db: Database) -> None:
    """The table small tensors share (tensors made before it keep their own tables); Adam's step counts
    moved into the parameters' rows (a count without its parameter's row is dropped: nothing can use it)."""
    db.execute(f"CREATE TABLE IF NOT EXISTS {_SMALL_TILES_TABLE}")
    if "adam_step" not in _columns(db).get("tensors", []):
        db.execute(f"ALTER TABLE {SCHEMA}.tensors ADD COLUMN adam_step BIGINT DEFAULT NULL")
    if db.execute("SELECT 1 FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = ? "
                  "AND table_name = 'adam_steps'", [SCHEMA]):  # a table, not (yet) the view
        db.execute(f"UPDATE {SCHEMA}.tensors AS t SET adam_step = s.step FROM (SELECT lower(param) AS param, "
                   f"max(step) AS step FROM {SCHEMA}.adam_steps GROUP BY lower(param)) AS s "
                   "WHERE lower(t.name) = s.param")
        db.execute(f"DROP TABLE {SCHEMA}.adam_steps")
    db.execute(f"CREATE OR REPLACE VIEW {_ADAM_STEPS_VIEW}")


_MIGRATIONS: dict[int, Callable[[Database], None]] = {2: _to_format_2, 3: _to_format_3, 4: _to_format_4}
