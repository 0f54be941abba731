"""Catalog tables in DuckDB: tensor relations (layout, statistics) and views (their query text)."""
from __future__ import annotations

import json

import numpy as np

from trdb.catalog.tensor_meta import TensorMeta
from trdb.storage.database import Database

SCHEMA = "_trdb"


def ensure_schema(db: Database) -> None:
    db.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    db.execute(f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.tensors (
        name VARCHAR PRIMARY KEY, keys VARCHAR, value_name VARCHAR, dtype VARCHAR, shape VARCHAR,
        tile VARCHAR, tile_table VARCHAR, tuple_count BIGINT, nnz BIGINT, csr_tuples BIGINT DEFAULT 0,
        csr_nnz BIGINT DEFAULT 0, distinct_keys VARCHAR DEFAULT NULL)""")
    db.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.views (name VARCHAR PRIMARY KEY, query VARCHAR)")
    db.execute(f"CREATE SEQUENCE IF NOT EXISTS {SCHEMA}.tile_table_ids")
    _upgrade(db)


def _upgrade(db: Database) -> None:
    """Databases written before CSR tiles (their tiles are all dense, which the added columns' defaults
    say) or before distinct key counts (NULL: the planner estimates them from the tile grid)."""
    rows = db.execute("SELECT table_name, list(column_name) FROM information_schema.columns "
                      f"WHERE table_schema = '{SCHEMA}' GROUP BY table_name")
    for table, columns in rows:
        if table == "tensors" and "csr_tuples" not in columns:
            db.execute(f"ALTER TABLE {SCHEMA}.tensors ADD COLUMN csr_tuples BIGINT DEFAULT 0")
            db.execute(f"ALTER TABLE {SCHEMA}.tensors ADD COLUMN csr_nnz BIGINT DEFAULT 0")
        if table == "tensors" and "distinct_keys" not in columns:  # before distinct key counts: estimated
            db.execute(f"ALTER TABLE {SCHEMA}.tensors ADD COLUMN distinct_keys VARCHAR DEFAULT NULL")
        elif table.startswith("tiles_") and "fmt" not in columns:
            db.execute(f"ALTER TABLE {SCHEMA}.{table} ADD COLUMN fmt TINYINT DEFAULT 0")


def new_tile_table_name(db: Database) -> str:
    table_id = db.execute(f"SELECT nextval('{SCHEMA}.tile_table_ids')")[0][0]
    return f"{SCHEMA}.tiles_{table_id}"


def load_tensors(db: Database) -> list[TensorMeta]:
    rows = db.execute(f"SELECT name, keys, value_name, dtype, shape, tile, tile_table, tuple_count, nnz, "
                      f"csr_tuples, csr_nnz, distinct_keys FROM {SCHEMA}.tensors")
    return [TensorMeta(name=r[0], keys=tuple(json.loads(r[1])), value_name=r[2], dtype=np.dtype(r[3]),
                       shape=tuple(json.loads(r[4])), tile=tuple(json.loads(r[5])), table=r[6],
                       tuple_count=r[7], nnz=r[8], csr_tuples=r[9] or 0, csr_nnz=r[10] or 0,
                       distinct_keys=tuple(json.loads(r[11])) if r[11] else None) for r in rows]


def save_tensor(db: Database, meta: TensorMeta) -> None:
    db.execute(f"DELETE FROM {SCHEMA}.tensors WHERE name = ?", [meta.name])
    distinct = json.dumps(list(meta.distinct_keys)) if meta.distinct_keys is not None else None
    db.execute(f"INSERT INTO {SCHEMA}.tensors VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
               [meta.name, json.dumps(list(meta.keys)), meta.value_name, meta.dtype.name,
                json.dumps(list(meta.shape)), json.dumps(list(meta.tile)), meta.table,
                meta.tuple_count, meta.nnz, meta.csr_tuples, meta.csr_nnz, distinct])


def delete_tensor(db: Database, name: str) -> None:
    db.execute(f"DELETE FROM {SCHEMA}.tensors WHERE name = ?", [name])


def load_views(db: Database) -> dict[str, str]:
    return {name: query for name, query in db.execute(f"SELECT name, query FROM {SCHEMA}.views")}


def save_view(db: Database, name: str, query: str) -> None:
    db.execute(f"DELETE FROM {SCHEMA}.views WHERE name = ?", [name])
    db.execute(f"INSERT INTO {SCHEMA}.views VALUES (?, ?)", [name, query])


def delete_view(db: Database, name: str) -> None:
    db.execute(f"DELETE FROM {SCHEMA}.views WHERE name = ?", [name])


def ordinary_tables(db: Database) -> dict[str, list[tuple[str, str]]]:
    """Plain SQL tables and views outside trdb's schema: name -> [(column, DuckDB type)]."""
    rows = db.execute("SELECT table_name, column_name, data_type FROM information_schema.columns "
                      f"WHERE table_schema NOT IN ('{SCHEMA}', 'information_schema', 'pg_catalog') "
                      "ORDER BY table_name, ordinal_position")
    tables: dict[str, list[tuple[str, str]]] = {}
    for table, column, data_type in rows:
        tables.setdefault(table, []).append((column, data_type))
    return tables
