"""Tile tables: one DuckDB table per tensor relation with BIGINT keys, a non-zero count and a BLOB tile."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import pyarrow as pa

from trdb.catalog.tensor_meta import TensorMeta
from trdb.storage.database import Database
from trdb.storage.tile_codec import decode_tiles, encode_tiles


def key_columns(count: int) -> list[str]:
    return [f"k{d}" for d in range(count)]


def create_tile_table(db: Database, table: str, key_count: int) -> None:
    columns = "".join(f"{name} BIGINT NOT NULL, " for name in key_columns(key_count))
    db.execute(f"CREATE TABLE {table} ({columns}nnz BIGINT NOT NULL, v BLOB NOT NULL)")


def drop_tile_table(db: Database, table: str) -> None:
    db.execute(f"DROP TABLE IF EXISTS {table}")


def write_tiles(db: Database, meta: TensorMeta, keys: np.ndarray, tiles: Sequence[np.ndarray]) -> int:
    """Append tiles under `keys` (an n x m int array); all-zero tiles are skipped. Returns tiles written."""
    nonzeros = np.fromiter((np.count_nonzero(t) for t in tiles), dtype=np.int64, count=len(tiles))
    kept = np.flatnonzero(nonzeros)
    if len(kept) == 0:
        return 0
    keys = np.asarray(keys, dtype=np.int64).reshape(len(tiles), len(meta.keys))
    columns = {name: pa.array(keys[kept, d]) for d, name in enumerate(key_columns(len(meta.keys)))}
    columns["nnz"] = pa.array(nonzeros[kept])
    columns["v"] = encode_tiles([tiles[i] for i in kept.tolist()], meta.dtype)
    db.insert_arrow(meta.table, pa.table(columns))
    return len(kept)


def read_tiles(db: Database, meta: TensorMeta, where: Optional[str] = None,
               params: Sequence = ()) -> tuple[np.ndarray, list[np.ndarray]]:
    """Keys (n x m int64, sorted) and read-only tiles of a tensor, optionally filtered by SQL on k0.."""
    names = key_columns(len(meta.keys))
    select = ", ".join(names + ["v"])
    order = f" ORDER BY {', '.join(names)}" if names else ""
    clause = f" WHERE {where}" if where else ""
    table = db.arrow(f"SELECT {select} FROM {meta.table}{clause}{order}", params)
    keys = np.column_stack([table.column(n).to_numpy() for n in names]) if names else \
        np.zeros((table.num_rows, 0), dtype=np.int64)
    keys = keys.astype(np.int64, copy=False).reshape(table.num_rows, len(names))
    shapes = [meta.tile_shape_at(k) for k in keys.tolist()]
    return keys, decode_tiles(table.column("v"), meta.dtype, shapes)


def delete_tiles(db: Database, meta: TensorMeta, keys: Optional[np.ndarray] = None) -> None:
    """Delete the tiles under `keys`, or every tile when keys is None."""
    if keys is None:
        db.execute(f"DELETE FROM {meta.table}")
        return
    if len(keys) == 0:
        return
    names = key_columns(len(meta.keys))
    if not names:
        db.execute(f"DELETE FROM {meta.table}")
        return
    doomed = pa.table({n: pa.array(np.asarray(keys, dtype=np.int64)[:, d]) for d, n in enumerate(names)})
    db.register_and_run("_trdb_doomed", doomed,
                        f"DELETE FROM {meta.table} WHERE ({', '.join(names)}) IN "
                        f"(SELECT ({', '.join(names)}) FROM _trdb_doomed)")


def existing_keys(db: Database, meta: TensorMeta, keys: np.ndarray) -> list[tuple[int, ...]]:
    """Which of `keys` are already stored."""
    names = key_columns(len(meta.keys))
    if not names:
        return [()] if db.execute(f"SELECT count(*) FROM {meta.table}")[0][0] else []
    probe = pa.table({n: pa.array(np.asarray(keys, dtype=np.int64)[:, d]) for d, n in enumerate(names)})
    on = " AND ".join(f"t.{n} = p.{n}" for n in names)
    rows = db.register_and_run("_trdb_probe", probe,
                               f"SELECT {', '.join('t.' + n for n in names)} FROM {meta.table} t "
                               f"JOIN _trdb_probe p ON {on}")
    return [tuple(r) for r in rows]


def tile_statistics(db: Database, meta: TensorMeta) -> tuple[int, int]:
    """(tuple count, total non-zeros) of a stored tensor."""
    count, nnz = db.execute(f"SELECT count(*), coalesce(sum(nnz), 0) FROM {meta.table}")[0]
    return int(count), int(nnz)
