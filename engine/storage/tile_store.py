"""Tile tables: one DuckDB table per tensor relation with BIGINT keys, non-zeros, format and a BLOB tile."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import pyarrow as pa

from trdb.kernels.sparse import stored_form
from trdb.storage.database import Database
from trdb.storage.sql_text import quote_dotted
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_codec import DENSE, decode_tiles, encode_tiles


def key_columns(count: int) -> list[str]:
    return [f"k{d}" for d in range(count)]


def _table(meta: TensorMeta) -> str:
    """The tensor's tile table, quoted: its name comes from the catalog, which a file may hold."""
    return quote_dotted(meta.table)


def create_tile_table(db: Database, table: str, key_count: int) -> None:
    columns = "".join(f"{name} BIGINT NOT NULL, " for name in key_columns(key_count))
    db.execute(f"CREATE TABLE {quote_dotted(table)} ({columns}nnz BIGINT NOT NULL, v BLOB NOT NULL, "
               f"fmt TINYINT DEFAULT {DENSE})")


def drop_tile_table(db: Database, table: str) -> None:
    db.execute(f"DROP TABLE IF EXISTS {quote_dotted(table)}")


def write_tiles(db: Database, meta: TensorMeta, keys: np.ndarray, tiles: Sequence) -> int:
    """Append tiles (host arrays or CSR tiles) under `keys` (an n x m int array), each stored dense or CSR
    as its density says; all-zero tiles are skipped. Returns tiles written."""
    forms = [stored_form(t) for t in tiles]
    nonzeros = np.fromiter((nnz for _, nnz in forms), dtype=np.int64, count=len(forms))
    kept = np.flatnonzero(nonzeros)
    if len(kept) == 0:
        return 0
    keys = np.asarray(keys, dtype=np.int64).reshape(len(tiles), len(meta.keys))
    blobs, formats = encode_tiles([forms[i][0] for i in kept.tolist()], meta.dtype)
    insert_encoded(db, meta, [keys[kept, d] for d in range(len(meta.keys))], nonzeros[kept], formats, blobs)
    return len(kept)


def insert_encoded(db: Database, meta: TensorMeta, keys: Sequence[np.ndarray], nonzeros: np.ndarray,
                   formats: np.ndarray, blobs: pa.Array) -> None:
    """Append encoded tiles: one key array per key column, their non-zeros, formats and bytes."""
    columns = {name: pa.array(key) for name, key in zip(key_columns(len(meta.keys)), keys)}
    columns.update(nnz=pa.array(nonzeros), v=blobs, fmt=pa.array(np.asarray(formats, dtype=np.int8)))
    db.register_and_run("_trdb_incoming", pa.table(columns),
                        f"INSERT INTO {_table(meta)} BY NAME SELECT * FROM _trdb_incoming")


def read_tiles(db: Database, meta: TensorMeta, where: Optional[str] = None,
               params: Sequence = ()) -> tuple[np.ndarray, list]:
    """Keys (n x m int64, sorted) and read-only tiles (dense or CSR) of a tensor, optionally filtered by SQL on k0.."""
    names = key_columns(len(meta.keys))
    select = ", ".join(names + ["fmt", "nnz", "v"])
    order = f" ORDER BY {', '.join(names)}" if names else ""
    clause = f" WHERE {where}" if where else ""
    table = db.arrow(f"SELECT {select} FROM {_table(meta)}{clause}{order}", params)
    keys = _keys(table, names)
    shapes = [meta.tile_shape_at(k) for k in keys.tolist()]
    return keys, decode_tiles(table.column("v"), meta.dtype, shapes, table.column("fmt").to_numpy(),
                              table.column("nnz").to_numpy(), name=meta.name, keys=keys)


def _keys(table: pa.Table, names: list[str]) -> np.ndarray:
    keys = np.column_stack([table.column(n).to_numpy() for n in names]) if names else \
        np.zeros((table.num_rows, 0), dtype=np.int64)
    return keys.astype(np.int64, copy=False).reshape(table.num_rows, len(names))


def tile_nonzeros(db: Database, meta: TensorMeta) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keys (n x m, sorted), non-zeros and format (tile_codec.DENSE / CSR32 / CSR64) of every stored tile."""
    names = key_columns(len(meta.keys))
    order = f" ORDER BY {', '.join(names)}" if names else ""
    table = db.arrow(f"SELECT {', '.join(names + ['nnz', 'fmt'])} FROM {_table(meta)}{order}")
    return _keys(table, names), table.column("nnz").to_numpy(), table.column("fmt").to_numpy()


def delete_tiles(db: Database, meta: TensorMeta, keys: Optional[np.ndarray] = None) -> None:
    """Delete the tiles under `keys`, or every tile when keys is None."""
    if keys is None:
        db.execute(f"DELETE FROM {_table(meta)}")
        return
    if len(keys) == 0:
        return
    names = key_columns(len(meta.keys))
    if not names:
        db.execute(f"DELETE FROM {_table(meta)}")
        return
    doomed = pa.table({n: pa.array(np.asarray(keys, dtype=np.int64)[:, d]) for d, n in enumerate(names)})
    db.register_and_run("_trdb_doomed", doomed,
                        f"DELETE FROM {_table(meta)} WHERE ({', '.join(names)}) IN "
                        f"(SELECT ({', '.join(names)}) FROM _trdb_doomed)")


def existing_keys(db: Database, meta: TensorMeta, keys: np.ndarray) -> list[tuple[int, ...]]:
    """Which of `keys` are already stored."""
    names = key_columns(len(meta.keys))
    if not names:
        return [()] if db.execute(f"SELECT count(*) FROM {_table(meta)}")[0][0] else []
    probe = pa.table({n: pa.array(np.asarray(keys, dtype=np.int64)[:, d]) for d, n in enumerate(names)})
    on = " AND ".join(f"t.{n} = p.{n}" for n in names)
    rows = db.register_and_run("_trdb_probe", probe,
                               f"SELECT {', '.join('t.' + n for n in names)} FROM {_table(meta)} t "
                               f"JOIN _trdb_probe p ON {on}")
    return [tuple(r) for r in rows]


def tile_statistics(db: Database, meta: TensorMeta) -> tuple:
    """(tuple count, total non-zeros, CSR tuples, non-zeros in CSR tuples, distinct values per key)."""
    distinct = "".join(f", count(DISTINCT {k})" for k in key_columns(len(meta.keys)))
    row = db.execute(f"SELECT count(*), coalesce(sum(nnz), 0), count(*) FILTER (WHERE fmt <> {DENSE}), "
                     f"coalesce(sum(nnz) FILTER (WHERE fmt <> {DENSE}), 0){distinct} FROM {_table(meta)}")[0]
    counts = tuple(int(x) for x in row)
    return counts[:4] + (counts[4:],)
