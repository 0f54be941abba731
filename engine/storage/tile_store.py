"""Tile tables: one DuckDB table per tensor relation with BIGINT keys, non-zeros, format and a BLOB tile."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa

from trdb.kernels.sparse import stored_form
from trdb.storage.database import Database
from trdb.storage.key_hash import partition_sql
from trdb.storage.sql_text import quote_dotted
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_codec import CSR64, DENSE, csr_sections, decode_tiles, encode_tiles


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
    return sorted_by_key(*_read(db, meta, f" WHERE {where}" if where else "", params))


def read_tile_rows(db: Database, meta: TensorMeta, first: int, last: int,
                   where: Optional[str] = None) -> tuple[np.ndarray, list]:
    """Keys and tiles of the rows with `first` <= rowid <= `last` (and `where`), sorted by key: one bounded
    read of a streamed scan (DuckDB pushes a rowid range into its scan, so each read costs its own rows)."""
    clause = f" WHERE rowid BETWEEN {int(first)} AND {int(last)}" + (f" AND {where}" if where else "")
    return sorted_by_key(*_read(db, meta, clause))


def _read(db: Database, meta: TensorMeta, clause: str, params: Sequence = ()) -> tuple[np.ndarray, list]:
    # unordered: DuckDB sorting the rows would copy every tile once more; the keys are sorted in numpy
    names = key_columns(len(meta.keys))
    table = db.arrow(f"SELECT {', '.join(names + ['fmt', 'nnz', 'v'])} FROM {_table(meta)}{clause}", params)
    keys = _keys(table, names)
    shapes = [meta.tile_shape_at(k) for k in keys.tolist()]
    return keys, decode_tiles(table.column("v"), meta.dtype, shapes, table.column("fmt").to_numpy(),
                              table.column("nnz").to_numpy(), name=meta.name, keys=keys)


def _keys(table: pa.Table, names: list[str]) -> np.ndarray:
    keys = np.column_stack([table.column(n).to_numpy() for n in names]) if names else \
        np.zeros((table.num_rows, 0), dtype=np.int64)
    return keys.astype(np.int64, copy=False).reshape(table.num_rows, len(names))


def sorted_by_key(keys: np.ndarray, tiles: list) -> tuple[np.ndarray, list]:
    """Keys and tiles in key order (the tiles are views: only the list is reordered)."""
    order = key_order(keys)
    if order is None:
        return keys, tiles
    return keys[order], [tiles[i] for i in order.tolist()]


def key_order(keys: np.ndarray) -> Optional[np.ndarray]:
    """The permutation that sorts the key rows; None when they are in order already."""
    if len(keys) < 2 or keys.shape[1] == 0:
        return None
    order = np.lexsort(keys.T[::-1])
    return None if np.array_equal(order, np.arange(len(keys))) else order


@dataclass(frozen=True)
class TileIndex:
    """Where a tensor's stored tiles are, in storage order, for a scan that reads them in bounded batches."""

    rowids: np.ndarray     # DuckDB's row ids, ascending
    keys: np.ndarray       # n x m
    nonzeros: np.ndarray
    formats: np.ndarray

    def __len__(self) -> int:
        return len(self.rowids)

    @property
    def nbytes(self) -> int:
        return self.rowids.nbytes + self.keys.nbytes + self.nonzeros.nbytes + self.formats.nbytes


def tile_index(db: Database, meta: TensorMeta, where: Optional[str] = None) -> TileIndex:
    """Row ids, keys, non-zeros and formats of the stored tiles (or of those `where` selects): no tile is read."""
    names = key_columns(len(meta.keys))
    clause = f" WHERE {where}" if where else ""
    table = db.arrow(f"SELECT rowid, {', '.join(names + ['nnz', 'fmt'])} FROM {_table(meta)}{clause} ORDER BY rowid")
    counts = [table.column(name).fill_null(-1).to_numpy().astype(np.int64, copy=False) for name in ("nnz", "fmt")]
    return TileIndex(table.column("rowid").to_numpy().astype(np.int64, copy=False), _keys(table, names), *counts)


def partition_filter(meta: TensorMeta, columns: Sequence[int], partitions: int, partition: int) -> str:
    """The WHERE condition that selects the tiles whose key columns `columns` hash to `partition`."""
    names = key_columns(len(meta.keys))
    return partition_sql([names[c] for c in columns], partitions, partition)


def decoded_sizes(meta: TensorMeta, index: TileIndex) -> np.ndarray:
    """The bytes each indexed tile takes decoded (its keys must be inside the grid: checked before; a
    tampered nnz or format only misjudges a read's size, and decoding the tile reports it)."""
    item = np.dtype(meta.dtype).itemsize
    keyed = zip(meta.tile, meta.shape[:len(meta.keys)])
    dims = [np.minimum(t, n - index.keys[:, d] * t) for d, (t, n) in enumerate(keyed)]
    dims += [np.full(len(index), t, dtype=np.int64) for t in meta.tile[len(dims):]]
    elements = np.prod(np.stack(dims), axis=0) if dims else np.ones(len(index), dtype=np.int64)
    rows = dims[0] if dims else np.ones(len(index), dtype=np.int64)
    width = np.where(index.formats == CSR64, 8, 4)
    sparse = sum(csr_sections(index.nonzeros, rows, item, width))
    return np.where(index.formats == DENSE, elements * item, sparse).astype(np.int64)


def estimated_size(meta: TensorMeta) -> int:
    """The bytes a tensor takes decoded, from its catalog statistics (an upper bound: edge tiles are smaller)."""
    item = np.dtype(meta.dtype).itemsize
    rows = meta.tile[0] if meta.tile else 1
    dense = meta.dense_tuples * math.prod(meta.tile) * item
    sparse = meta.csr_nnz * (item + 8) + meta.csr_tuples * (rows + 1) * 8
    return int(dense + sparse + meta.tuple_count * len(meta.keys) * 8)


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
