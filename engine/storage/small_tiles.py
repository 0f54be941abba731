"""Small tensors of one tile share one table, `_trdb.small_tiles`: a step writes all of theirs in one UPDATE.

DuckDB 2.0 spends about 0.3-0.5 ms on any UPDATE, so a MINIMIZE step of a small model that wrote a dozen
one-tile tensors (parameters and Adam's moments), one table each, spent most of its write time on the
statements, not the bytes (measured in DuckDB alone, with the COMMIT: twelve tiles of a 64-64-10 MLP 7.0 ms
as twelve UPDATEs against 3.2 ms as one; Cora's GCN, six tiles up to 92 KB, 7.2 against 4.3 ms). A tensor
whose grid is one tile of at most SMALL_TILE_BYTES dense is stored as (at most) one row of that table, under
its own number (`owner`, from the catalog's tile table name `_trdb.small_<n>`); its key columns read as 0.
The shared table is bounded too: a new tensor goes there only while the table's rows at SMALL_TILE_BYTES
each fit in one part (tile_parts), so DuckDB never commits more of it at once than a part may hold.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa

from trdb.errors import InternalError
from trdb.storage.catalog_format import SCHEMA, SMALL_TILE_TABLE, SMALL_TILES
from trdb.storage.database import Database
from trdb.storage.tensor_meta import TensorMeta

TABLE = SMALL_TILES
SMALL_TILE_BYTES = 128 << 10  # the overwrite limit of one tile (tile_store.OVERWRITE_BYTES): the same trade


def is_small(table: str) -> bool:
    """Whether the catalog's tile table name `table` names rows of the shared table."""
    return SMALL_TILE_TABLE.fullmatch(table) is not None


def owner(table: str) -> int:
    if not is_small(table):
        raise InternalError(f"{table} is not a small tensor's name")
    return int(table.rsplit("_", 1)[1])


def qualifies(meta: TensorMeta) -> bool:
    """Whether the tensor is one tile position whose dense tile takes at most SMALL_TILE_BYTES."""
    return meta.max_tuples == 1 and math.prod(meta.tile) * np.dtype(meta.dtype).itemsize <= SMALL_TILE_BYTES


def has_room(db: Database, limit: int) -> bool:
    """Whether one more tensor fits: the table's rows (deleted ones too) at the most bytes each, within `limit`."""
    rows = db.execute("SELECT estimated_size FROM duckdb_tables() WHERE database_name = current_database() "
                      "AND schema_name = ? AND table_name = 'small_tiles'", [SCHEMA])
    return bool(rows) and (int(rows[0][0] or 0) + 1) * SMALL_TILE_BYTES <= limit


def source(table: str, key_count: int) -> str:
    """A FROM item with a tile table's columns (`rowid` too) that holds the tensor's row of the shared table."""
    keys = "".join(f"0::BIGINT AS k{d}, " for d in range(key_count))
    return f"(SELECT rowid AS rowid, {keys}nnz, v, fmt FROM {TABLE} WHERE owner = {owner(table)})"


def insert(db: Database, table: str, data: pa.Table, overwrite: bool = False) -> None:
    """Append tile rows (a tile table's columns: keys, nnz, v, fmt) to the tensor's rows; `overwrite`: one
    row, written over the stored one where there is one."""
    columns = ["nnz", "v", "fmt"]
    values = [value for record in zip(*(data.column(c).to_pylist() for c in columns)) for value in record]
    if overwrite and data.num_rows == 1:
        changed = _write_over(db, owner(table), *values)
        if changed == 1:
            return
        if changed not in (0, None):
            raise InternalError(f"an overwrite of small tensor {table} changed {changed} rows")
    db.execute(f"INSERT INTO {TABLE} (owner, nnz, v, fmt) VALUES "
               + ", ".join([f"({owner(table)}, ?, ?, ?)"] * data.num_rows), values)


def delete(db: Database, table: str) -> None:
    db.execute(f"DELETE FROM {TABLE} WHERE owner = ?", [owner(table)])


def overwrite(db: Database, tables: Sequence[str], nonzeros: Sequence[int], blobs: Sequence[bytes],
              formats: Sequence[int]) -> None:
    """Write each tensor's one stored tile over in one UPDATE (each must have exactly one row)."""
    owners = [owner(t) for t in tables]
    if len(owners) == 1:
        changed = _write_over(db, owners[0], int(nonzeros[0]), blobs[0], int(formats[0]))
    else:
        new = pa.table({"owner": pa.array(owners, pa.int64()), "nnz": pa.array(nonzeros, pa.int64()),
                        "v": pa.array(blobs, pa.binary()), "fmt": pa.array(formats, pa.int8())})
        counted = db.run_over_arrow(new, f"UPDATE {TABLE} AS s SET nnz = n.nnz, v = n.v, fmt = n.fmt "
                                         "FROM {source} AS n WHERE s.owner = n.owner")
        changed = counted[0][0] if counted else None
    if changed is not None and changed != len(owners):  # DuckDB's count row: anything else is a broken promise
        raise InternalError(f"an overwrite of {len(owners)} small tensors changed {changed} rows")


def _write_over(db: Database, owner_id: int, nonzeros: int, blob: bytes, fmt: int) -> Optional[int]:
    """One tensor's row written over in place: the rows DuckDB says it changed (None where it says nothing)."""
    changed = db.execute(f"UPDATE {TABLE} SET nnz = ?, v = ?, fmt = ? WHERE owner = ?", [nonzeros, blob, fmt, owner_id])
    return changed[0][0] if changed else None


def key_zero(keys: Optional[np.ndarray]) -> bool:
    """Whether `keys` (n x m) hold the one key a small tensor has (all zeros); None: every key."""
    return keys is None or bool(len(keys)) and not np.asarray(keys).any(axis=1).all()
