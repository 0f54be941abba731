"""Tile tables: one DuckDB table per tensor relation with BIGINT keys, non-zeros, format and a BLOB tile."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trdb.errors import InternalError
from trdb.kernels.distinct import distinct
from trdb.kernels.sparse import stored_form
from trdb.storage import small_tiles, tile_parts
from trdb.storage.catalog_validation import TILE_TABLE
from trdb.storage.database import Database
from trdb.storage.external_tensors import refuse_write
from trdb.storage.key_hash import partition_sql
from trdb.storage.progress import count_written
from trdb.storage.sql_text import quote_dotted
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_codec import (
    CSR64,
    DENSE,
    csr_sections,
    decode_stacks,
    decode_tiles,
    encode_dense_batch,
    encode_stack,
    encode_tiles,
)
from trdb.storage.tile_runs import StackedTiles, TileRuns, as_tile_runs, tile_views

# an append of at most this many tiles and bytes goes in as one parameterized INSERT: DuckDB 2.0 binds each
# parameter row at about 45 us, where an Arrow append costs about 0.65 ms whatever its rows (in memory, one
# thread: 4 tiles of 4 KB 0.50 against 0.66 ms, 16 1.0 against 0.68, 64 3.3 against 1.1; one tile of 256 KB
# 0.55 against 0.88, of 1 MB 2.1 against 1.5)
SMALL_APPEND_ROWS = 4
SMALL_APPEND_BYTES = 512 << 10
# a tile up to this size is written over by one UPDATE (planned_overwrite); above it, replacing the table and
# inserting the tile costs less (measured with the commit: 92 KB 1.7 against 1.9-2.3 ms, 256 KB 4.1-4.6 against
# 3.2-3.3 ms, 1 MB 12-14 against 6.4-6.5 ms)
OVERWRITE_BYTES = 128 << 10
# tiles up to this size read out of key order are stacked again in key order (a copy, which lets scans hand them
# on as column batches); larger ones are reordered as the views they are
RESTACK_BYTES = 64 << 10
MAX_RUNS = 64  # a partition's read names at most this many runs of row ids (one SELECT each); with more (small
               # tiles) it reads the row id range whole and keeps its own rows with the hash filter, reading
               # the other partitions' tiles in between too (DuckDB evaluates that filter after its scan)


def key_columns(count: int) -> list[str]:
    return [f"k{d}" for d in range(count)]


def _source(db: Database, meta: TensorMeta, columns: Sequence[str], alias: str = "tiles") -> str:
    """The FROM item of every stored tile of the tensor, in all its parts (names from the catalog: quoted)."""
    tables = tile_parts.parts(db, meta.table)
    if len(tables) == 1:
        return f"{_from(meta, tables[0])} AS {alias}"
    listed = ", ".join(columns)
    return "(" + " UNION ALL ".join(f"SELECT {listed} FROM {quote_dotted(t)}" for t in tables) + f") AS {alias}"


def _from(meta: TensorMeta, table: str) -> str:
    """A FROM item of one part's rows, with their row ids: the part itself, or a small tensor's shared rows."""
    return small_tiles.source(table, len(meta.keys)) if small_tiles.is_small(table) else quote_dotted(table)


def create_tile_table(db: Database, table: str, key_count: int, replace: bool = False) -> None:
    """An empty tile table; `replace`: in place of the table of that name (one statement, not a DROP and a CREATE).
    A small tensor's is its rows of the shared table: none to make (and those there deleted, to replace them)."""
    if small_tiles.is_small(table):
        if replace:
            small_tiles.delete(db, table)
        return
    columns = "".join(f"{name} BIGINT NOT NULL, " for name in key_columns(key_count))
    db.execute(f"CREATE {'OR REPLACE ' if replace else ''}TABLE {quote_dotted(table)} ({columns}nnz BIGINT NOT NULL, "
               f"v BLOB NOT NULL, fmt TINYINT DEFAULT {DENSE})")
    tile_parts.forget(db, table)


def drop_tile_table(db: Database, table: str) -> None:
    """Drop a tensor's tile table and all its parts (a name trdb does not give, from a damaged catalog, is
    left alone: it may name any table)."""
    if small_tiles.is_small(table):
        small_tiles.delete(db, table)
        return
    if not TILE_TABLE.fullmatch(table):
        return
    for part in reversed(tile_parts.parts(db, table)):
        db.execute(f"DROP TABLE IF EXISTS {quote_dotted(part)}")
    tile_parts.forget(db, table)


DISTINCT_PARTS = 64  # batches' distinct key values merged into one array once this many are held
MARKED_KEYS = 1 << 24  # a key column of at most this many tiles counts its distinct values by marks, not sorts


class WrittenStatistics:
    """`tile_statistics` of the tiles a writer inserted, counted as they go in (no query): those of the
    tensor when the writer wrote all of it. `grid`: the tensor's tiles along each key, where known (a key
    column with few enough is counted by marking each value seen)."""

    def __init__(self, key_count: int, grid: Optional[Sequence[int]] = None):
        self.tuples = self.nnz = self.csr_tuples = self.csr_nnz = 0
        sizes = list(grid) if grid is not None and len(grid) == key_count else [None] * key_count
        self._marks = [np.zeros(n, dtype=bool) if n is not None and 0 < n <= MARKED_KEYS else None for n in sizes]
        self._distinct: list[list[np.ndarray]] = [[] for _ in range(key_count)]  # each batch's distinct values

    def add(self, keys: np.ndarray, nonzeros: np.ndarray, formats: np.ndarray) -> None:
        csr = np.asarray(formats) != DENSE
        self.tuples += len(nonzeros)
        self.nnz += int(nonzeros.sum())
        self.csr_tuples += int(csr.sum())
        self.csr_nnz += int(nonzeros[csr].sum())
        for column, (marks, seen) in enumerate(zip(self._marks, self._distinct)):
            values = keys[:, column]
            if marks is not None and (not len(values) or (values.min() >= 0 and values.max() < len(marks))):
                marks[values] = True
                continue
            seen.append(distinct(values))
            if len(seen) >= DISTINCT_PARTS:  # merged now and then: at most a few arrays of the values seen
                seen[:] = [distinct(np.concatenate(seen))]

    def as_tuple(self) -> tuple:
        return self.tuples, self.nnz, self.csr_tuples, self.csr_nnz, \
            tuple(self._count(marks, seen) for marks, seen in zip(self._marks, self._distinct))

    @staticmethod
    def _count(marks: Optional[np.ndarray], seen: list[np.ndarray]) -> int:
        if marks is None or not marks.any():
            return len(distinct(np.concatenate(seen))) if seen else 0
        if seen:  # values outside the grid too (a writer checks keys first: not met in practice)
            return len(np.union1d(np.flatnonzero(marks), np.concatenate(seen)))
        return int(np.count_nonzero(marks))


def write_tiles(db: Database, meta: TensorMeta, keys: np.ndarray, tiles: Sequence,
                statistics: Optional[WrittenStatistics] = None, overwrite: bool = False) -> int:
    """Append tiles (host arrays or CSR tiles) under `keys` (an n x m int array), each stored dense or CSR
    as its density says. Every tile given is stored, an all-zero one too: zeros are values (a tensor is
    sparse only where its writer leaves tiles out). Returns tiles written (counted in `statistics` too).
    `overwrite`: the tiles replace those stored under their keys, which were not deleted (`insert_encoded`)."""
    refuse_write(meta)  # its files lie outside the database's transactions
    if len(tiles) == 0:
        return 0
    return _write_encoded(db, meta, keys, _encoded(tiles, meta.dtype), statistics, overwrite)


def write_stack(db: Database, meta: TensorMeta, keys: np.ndarray, stack: np.ndarray,
                statistics: Optional[WrittenStatistics] = None, overwrite: bool = False) -> int:
    """`write_tiles` of tiles of one shape stacked in one array `(n, *tile)`: encoded with no step per tile
    where all are stored dense."""
    refuse_write(meta)
    if len(stack) == 0:
        return 0
    encoded = encode_stack(stack, meta.dtype)
    if encoded is None:
        return write_tiles(db, meta, keys, list(stack), statistics, overwrite)
    return _write_encoded(db, meta, keys, encoded, statistics, overwrite)


@dataclass(frozen=True)
class Overwrite:
    """One dense tile, encoded, to be written over the one tile stored under the same key (`write_overwrites`)."""

    meta: TensorMeta
    keys: np.ndarray  # 1 x m
    nonzeros: int
    blob: bytes
    fmt: int


def planned_overwrite(db: Database, meta: TensorMeta, key: np.ndarray, stack: np.ndarray,
                      statistics: Optional[WrittenStatistics] = None) -> Optional[Overwrite]:
    """The overwrite of a stack of one dense tile `(1, *tile)` over the one tile stored under the same `key`
    (1 x m), where the tensor's tiles lie in one part and the tile is stored dense and small: a MINIMIZE step
    of a small model writes a dozen tensors of one tile, and replacing each table (CREATE OR REPLACE, then
    INSERT) cost twice the statements. The caller knows `key` is the only one stored. None (nothing to
    write) where it does not apply; else `statistics` counts the tile."""
    refuse_write(meta)
    if len(stack) != 1 or stack.nbytes > OVERWRITE_BYTES or tile_parts.parts(db, meta.table) != [meta.table]:
        return None
    encoded = encode_stack(stack, meta.dtype)
    if encoded is None:
        return None
    blobs, formats, nonzeros = encoded
    keys = np.asarray(key, dtype=np.int64).reshape(1, len(meta.keys))
    if statistics is not None:
        statistics.add(keys, nonzeros, formats)
    return Overwrite(meta, keys, int(nonzeros[0]), blobs[0].as_py(), int(formats[0]))


def write_overwrites(db: Database, overwrites: Sequence[Overwrite]) -> None:
    """Write planned overwrites: small tensors' all in one UPDATE of their shared table, others one each."""
    small = [o for o in overwrites if small_tiles.is_small(o.meta.table)]
    if small:
        small_tiles.overwrite(db, [o.meta.table for o in small], [o.nonzeros for o in small],
                              [o.blob for o in small], [o.fmt for o in small])
    for o in overwrites:
        if not small_tiles.is_small(o.meta.table):
            _overwrite_row(db, o.meta, o.keys, o.nonzeros, o.blob, o.fmt)
        tile_parts.rewritten(db, o.meta.table)
        db.file.note_garbage(len(o.blob))  # the tile written over, of about this size
    count_written(len(overwrites))


def _overwrite_row(db: Database, meta: TensorMeta, keys: np.ndarray, nonzeros: int, blob: bytes, fmt: int) -> None:
    if meta.max_tuples == 1 and not keys.any():  # the one key there can be: no WHERE (0.1 ms of DuckDB's a tile)
        where, key_values = "", []
    else:
        where = " WHERE " + " AND ".join(f"{name} = ?" for name in key_columns(len(meta.keys)))
        key_values = keys[0].tolist()
    changed = db.execute(f"UPDATE {quote_dotted(meta.table)} SET nnz = ?, v = ?, fmt = ?{where}",
                         [nonzeros, blob, fmt, *key_values])
    if changed and changed[0][0] != 1:  # DuckDB's count row: anything but the one tile is a broken promise
        raise InternalError(f"overwrite of one tile of {meta.name} changed {changed[0][0]} rows")


def _write_encoded(db: Database, meta: TensorMeta, keys: np.ndarray, encoded: tuple[pa.Array, np.ndarray, np.ndarray],
                   statistics: Optional[WrittenStatistics], overwrite: bool = False) -> int:
    blobs, formats, nonzeros = encoded
    keys = np.asarray(keys, dtype=np.int64).reshape(len(blobs), len(meta.keys))
    insert_encoded(db, meta, [keys[:, d] for d in range(len(meta.keys))], nonzeros, formats, blobs, overwrite)
    if statistics is not None:
        statistics.add(keys, nonzeros, formats)
    return len(blobs)


def _encoded(tiles: Sequence, dtype: np.dtype) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """The tiles encoded in their stored form (blobs, formats), and each tile's non-zeros."""
    batch = encode_dense_batch(tiles, dtype)
    if batch is not None:
        return batch
    forms = [stored_form(t) for t in tiles]
    nonzeros = np.fromiter((nnz for _, nnz in forms), dtype=np.int64, count=len(forms))
    return (*encode_tiles([form for form, _ in forms], dtype), nonzeros)


def insert_encoded(db: Database, meta: TensorMeta, keys: Sequence[np.ndarray], nonzeros: np.ndarray,
                   formats: np.ndarray, blobs: pa.Array, overwrite: bool = False) -> None:
    """Append encoded tiles: one key array per key column, their non-zeros, formats and bytes. They go into
    the first part of the tile table with room, in runs of at most `part_bytes`; new parts as needed.
    `overwrite` (an UPDATE's): a small tensor's tile is written over its stored one, where there is one (a
    DELETE and an INSERT left a deleted row in the shared table each time: 1,500 UPDATEs of one 16 KB tile
    grew a file from 2.6 to 18 MB); other tensors' stored tiles under the keys must be deleted first."""
    refuse_write(meta)  # its files lie outside the database's transactions
    count_written(len(blobs))
    columns = {name: pa.array(key) for name, key in zip(key_columns(len(meta.keys)), keys)}
    columns.update(nnz=pa.array(nonzeros), v=blobs, fmt=pa.array(np.asarray(formats, dtype=np.int8)))
    table = pa.table(columns)
    if small_tiles.is_small(meta.table):
        small_tiles.insert(db, meta.table, table, overwrite)
        return
    sizes = _blob_sizes(blobs)
    found = tile_parts.appender(db, meta.table, lambda tables: _part_sizes(db, meta, tables))
    limit = tile_parts.part_bytes(db)
    start = 0
    while start < len(sizes):
        run = _run_length(sizes[start:], limit)
        nbytes = int(sizes[start:start + run].sum())
        position = found.target(nbytes, limit)
        if position is None:
            position = tile_parts.new_part(db, found, lambda name: create_tile_table(db, name, len(meta.keys)))
        _append(db, found.tables[position], table.slice(start, run))
        found.sizes[position] += nbytes
        start += run


def _blob_sizes(blobs: pa.Array) -> np.ndarray:
    return pc.binary_length(blobs).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _run_length(sizes: np.ndarray, limit: int) -> int:
    """How many of the next tiles go into one part together: at most `limit` bytes, at least one tile."""
    return max(1, int(np.searchsorted(np.cumsum(sizes), limit, side="right")))


def _part_sizes(db: Database, meta: TensorMeta, tables: list[str]) -> tuple[list[int], list[int]]:
    """The bytes and the rows each part holds now, from its small columns (no tile is read). Where every
    part's rows at the most a tile can take would fit in one part, that bound stands for each part's bytes,
    and only its rows are counted (the keys, non-zeros and formats of 200,000 tiles took 10 ms of an UPDATE
    of 100 of them): no part then exceeds `part_bytes`, though a new one may start sooner than it would."""
    rows = _live_rows(db, tables)
    bound = _tile_bound(meta)
    if sum(rows) * bound <= tile_parts.part_bytes(db):
        return [n * bound for n in rows], rows
    index = _index(db, meta, tables, None)
    sizes = np.maximum(decoded_sizes(meta, index), 0)
    ranges = list(zip(index.starts[:-1].tolist(), index.starts[1:].tolist()))
    return [int(sizes[lo:hi].sum()) for lo, hi in ranges], [hi - lo for lo, hi in ranges]


def _live_rows(db: Database, tables: list[str]) -> list[int]:
    """The rows each part holds now, deleted ones not counted (DuckDB's estimated_size counts them), in one query."""
    return [int(n) for _, n in sorted(db.execute(" UNION ALL ".join(
        f"SELECT {i}, count(*) FROM {quote_dotted(t)}" for i, t in enumerate(tables))))]


def _tile_bound(meta: TensorMeta) -> int:
    """The most bytes one tile of the tensor takes decoded (`decoded_sizes`), dense or CSR: every entry stored
    with 64-bit indices, each section padded."""
    elements = math.prod(meta.tile)
    rows = meta.tile[0] if meta.tile else 1
    return elements * (np.dtype(meta.dtype).itemsize + 8) + (rows + 1) * 8 + 24


def _append(db: Database, table: str, data: pa.Table) -> None:
    if data.num_rows <= SMALL_APPEND_ROWS and data.nbytes <= SMALL_APPEND_BYTES:
        # a few small tiles (a bias, a vector parameter): one INSERT with their values as parameters costs
        # about 0.6 ms, an Arrow scan about 2 ms more
        columns = data.column_names
        row = "(" + ", ".join("?" * len(columns)) + ")"
        values = [value for record in zip(*(data.column(c).to_pylist() for c in columns)) for value in record]
        db.execute(f"INSERT INTO {quote_dotted(table)} ({', '.join(columns)}) VALUES "
                   + ", ".join([row] * data.num_rows), values)
        return
    db.append_arrow(quote_dotted(table), data)


def read_tiles(db: Database, meta: TensorMeta, where: Optional[str] = None,
               params: Sequence = ()) -> tuple[np.ndarray, list]:
    """Keys (n x m int64, sorted) and read-only tiles (dense or CSR) of a tensor, optionally filtered by SQL on k0.."""
    return sorted_by_key(*_read(db, meta, f" WHERE {where}" if where else "", params))


def read_tiles_at(db: Database, meta: TensorMeta, keys: np.ndarray) -> tuple[np.ndarray, list]:
    """The tiles stored under `keys` (a few: one bounded read), sorted by key."""
    names = key_columns(len(meta.keys))
    if not names:  # one tile under the empty key
        return read_tiles(db, meta)
    wanted = " OR ".join("(" + " AND ".join(f"{n} = {int(k)}" for n, k in zip(names, row)) + ")"
                         for row in np.asarray(keys, dtype=np.int64).tolist())
    return read_tiles(db, meta, wanted or "false")


def read_tile_rows(db: Database, meta: TensorMeta, index: "TileIndex", start: int, stop: int,
                   where: Optional[str] = None) -> tuple[np.ndarray, list]:
    """Keys and tiles of rows start..stop-1 of `index` (and `where`), sorted by key: one bounded read of a
    streamed scan, rowid ranges in each part it spans (DuckDB pushes them into its scan, so each read costs
    its own rows)."""
    if where:  # one partition's rows: read exactly its runs of row ids, not the others' tiles between them
        runs = index.rowid_runs(start, stop)
        if len(runs) <= MAX_RUNS:
            keys, tiles = _decoded(meta, db.arrow(_rows_sql(meta, runs)))
            if _same_keys(keys, index.keys[start:stop]):
                return sorted_by_key(keys, tiles)
    ranges = [(int(index.rowids[lo]), int(index.rowids[hi - 1]), table) for lo, hi, table in index.part_ranges(start, stop)]
    return sorted_by_key(*_decoded(meta, db.arrow(_rows_sql(meta, ranges, where))))


def _rows_sql(meta: TensorMeta, ranges: Sequence[tuple[int, int, str]], where: Optional[str] = None) -> str:
    """The tiles of row ids first..last (of each range's part, and `where`): one SELECT per range."""
    names = key_columns(len(meta.keys)) + ["fmt", "nnz", "v"]
    extra = f" AND {where}" if where else ""
    return " UNION ALL ".join(f"SELECT {', '.join(names)} FROM {_from(meta, table)} "
                              f"WHERE rowid BETWEEN {first} AND {last}{extra}" for first, last, table in ranges)


def _same_keys(keys: np.ndarray, wanted: np.ndarray) -> bool:
    """Whether a read by row id found exactly the tiles the index put there (a checkpoint may move row ids)."""
    if keys.shape != wanted.shape:
        return False
    order, want = key_order(keys), key_order(wanted)
    return np.array_equal(keys if order is None else keys[order], wanted if want is None else wanted[want])


def read_stacks(db: Database, meta: TensorMeta) -> Union[tuple[np.ndarray, list], StackedTiles]:
    """`read_tiles` of a whole tensor, but where every tile lies in a run of stacked dense tiles, those runs as
    they are, sorted by key (one stack where it took sorting): no view of each tile is made."""
    table = _read_table(db, meta, "")
    keys = _keys(table, key_columns(len(meta.keys)))
    runs = decode_stacks(table.column("v"), meta.dtype, meta.tile_shape_list(keys), table.column("fmt").to_numpy(),
                         table.column("nnz").to_numpy(), name=meta.name, keys=keys)
    if not isinstance(runs, tuple):  # some tile in no run: the tiles as a list
        return sorted_by_key(keys, runs)
    order = key_order(keys)
    if order is None:
        return StackedTiles(keys, runs)
    stack = _restacked(runs, order)
    if stack is None:
        return sorted_by_key(*StackedTiles(keys, runs).tiles())
    return StackedTiles(keys[order], ((0, stack),))


def _read(db: Database, meta: TensorMeta, clause: str, params: Sequence = ()) -> tuple[np.ndarray, list]:
    return _decoded(meta, _read_table(db, meta, clause, params))


def _read_table(db: Database, meta: TensorMeta, clause: str, params: Sequence = ()) -> pa.Table:
    # unordered: DuckDB sorting the rows would copy every tile once more; the keys are sorted in numpy
    columns = key_columns(len(meta.keys)) + ['fmt', 'nnz', 'v']
    return db.arrow(f"SELECT {', '.join(columns)} FROM {_source(db, meta, columns)}{clause}", params)


def _decoded(meta: TensorMeta, table: pa.Table) -> tuple[np.ndarray, list]:
    keys = _keys(table, key_columns(len(meta.keys)))
    shapes = meta.tile_shape_list(keys)
    return keys, decode_tiles(table.column("v"), meta.dtype, shapes, table.column("fmt").to_numpy(),
                              table.column("nnz").to_numpy(), name=meta.name, keys=keys)


def _keys(table: pa.Table, names: list[str]) -> np.ndarray:
    keys = np.column_stack([table.column(n).to_numpy() for n in names]) if names else \
        np.zeros((table.num_rows, 0), dtype=np.int64)
    return keys.astype(np.int64, copy=False).reshape(table.num_rows, len(names))


def sorted_by_key(keys: np.ndarray, tiles: list) -> tuple[np.ndarray, list]:
    """Keys and tiles in key order: the list reordered, its tiles as they are, but tiles read in runs of one
    stacked array (storage/tile_runs.py) come in runs again: where every tile is in a run of one shape and
    dtype, the stacks are reordered as one (a copy), else the reordered list is split into runs anew (tiles
    stored out of key order, after a partial UPDATE or an INSERT, went on as a list, tuple by tuple through
    every operator after the scan: a SUM over 200,000 tiles of 8 x 8 took 640 against 100 ms)."""
    order = key_order(keys)
    if order is None:
        return keys, tiles
    runs = getattr(tiles, "runs", ())
    stack = _restacked(runs, order) if sum(len(stack) for _, stack in runs) == len(tiles) else None
    if stack is not None:
        return keys[order], TileRuns(tile_views(stack), ((0, stack),))
    ordered = [tiles[i] for i in order.tolist()]
    return keys[order], as_tile_runs(ordered) if runs and runs[0][1][0].nbytes <= RESTACK_BYTES else ordered


def _restacked(runs: Sequence[tuple[int, np.ndarray]], order: np.ndarray) -> Optional[np.ndarray]:
    """The runs' tiles (all of a read, in storage order) as one read-only stack in key order (`order`): a copy,
    where they are of one shape and dtype and small (RESTACK_BYTES); None otherwise."""
    stacks = [stack for _, stack in runs]
    if not stacks or len({(stack.shape[1:], stack.dtype) for stack in stacks}) != 1 or \
            stacks[0][0].nbytes > RESTACK_BYTES:
        return None
    stack = (stacks[0] if len(stacks) == 1 else np.concatenate(stacks))[order]
    stack.flags.writeable = False
    return stack


def key_order(keys: np.ndarray) -> Optional[np.ndarray]:
    """The permutation that sorts the key rows; None when they are in order already."""
    if len(keys) < 2 or keys.shape[1] == 0:
        return None
    order = np.lexsort(keys.T[::-1])
    return None if np.array_equal(order, np.arange(len(keys))) else order


@dataclass(frozen=True)
class TileIndex:
    """Where a tensor's stored tiles are, in storage order, for a scan that reads them in bounded batches."""

    rowids: np.ndarray     # DuckDB's row ids, ascending within each part
    keys: np.ndarray       # n x m
    nonzeros: np.ndarray
    formats: np.ndarray
    starts: np.ndarray     # where the rows of each of `tables` begin (and the row count last)
    tables: tuple[str, ...]

    def part_ranges(self, start: int, stop: int) -> list[tuple[int, int, str]]:
        """Rows start..stop-1 split by the part holding them: (first, last + 1, table) each."""
        cuts = [start, *(int(c) for c in self.starts if start < c < stop), stop]
        owners = np.searchsorted(self.starts, cuts[:-1], side="right") - 1
        return [(lo, hi, self.tables[int(o)]) for lo, hi, o in zip(cuts[:-1], cuts[1:], owners)]

    def rowid_runs(self, start: int, stop: int) -> list[tuple[int, int, str]]:
        """Rows start..stop-1 as runs of consecutive row ids: (first, last, table) each."""
        runs = []
        for lo, hi, table in self.part_ranges(start, stop):
            ids = self.rowids[lo:hi]
            if not len(ids):  # an empty part
                continue
            runs += [(int(run[0]), int(run[-1]), table) for run in np.split(ids, np.flatnonzero(np.diff(ids) != 1) + 1)]
        return runs

    def __len__(self) -> int:
        return len(self.rowids)

    @property
    def nbytes(self) -> int:
        arrays = (self.rowids, self.keys, self.nonzeros, self.formats, self.starts)
        return sum(a.nbytes for a in arrays)


def tile_index(db: Database, meta: TensorMeta, where: Optional[str] = None) -> TileIndex:
    """Row ids, keys, non-zeros and formats of the stored tiles (or of those `where` selects), in every part,
    in storage order: no tile is read."""
    return _index(db, meta, tile_parts.parts(db, meta.table), where)


def _index(db: Database, meta: TensorMeta, tables: list[str], where: Optional[str]) -> TileIndex:
    names = key_columns(len(meta.keys))
    clause = f" WHERE {where}" if where else ""
    listed = ", ".join(names + ["nnz", "fmt"])
    selects = [f"SELECT rowid, {part} AS part, {listed} FROM {_from(meta, t)}{clause}" for part, t in enumerate(tables)]
    table = db.arrow(" UNION ALL ".join(selects) + " ORDER BY part, rowid")
    counts = [table.column(name).fill_null(-1).to_numpy().astype(np.int64, copy=False) for name in ("nnz", "fmt")]
    parts = table.column("part").to_numpy()
    starts = np.searchsorted(parts, np.arange(len(tables) + 1)).astype(np.int64)
    rowids = table.column("rowid").to_numpy().astype(np.int64, copy=False)
    return TileIndex(rowids, _keys(table, names), *counts, starts, tuple(tables))


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
    columns = names + ["nnz", "fmt"]
    table = db.arrow(f"SELECT {', '.join(columns)} FROM {_source(db, meta, columns)}{order}")
    return _keys(table, names), table.column("nnz").to_numpy(), table.column("fmt").to_numpy()


def delete_tiles(db: Database, meta: TensorMeta, keys: Optional[np.ndarray] = None) -> None:
    """Delete the tiles under `keys`, or every tile when keys is None (its parts but the first are dropped)."""
    refuse_write(meta)  # its files lie outside the database's transactions
    names = key_columns(len(meta.keys))
    if keys is not None and len(keys) == 0:
        return
    if small_tiles.is_small(meta.table):
        if small_tiles.key_zero(keys):
            small_tiles.delete(db, meta.table)
        return
    tables = tile_parts.parts(db, meta.table)
    tile_parts.forget(db, meta.table)
    if keys is None or not names:
        emptied = tables
    else:
        doomed = pa.table({n: pa.array(np.asarray(keys, dtype=np.int64)[:, d]) for d, n in enumerate(names)})
        statements = "; ".join(f"DELETE FROM {quote_dotted(t)} WHERE ({', '.join(names)}) IN "
                               f"(SELECT ({', '.join(names)}) FROM _trdb_doomed)" for t in tables)
        db.register_and_run("_trdb_doomed", doomed, statements)
        db.file.note_garbage(len(keys) * math.prod(meta.tile) * meta.dtype.itemsize)  # at most, stored dense
        emptied = [table for table, rows in zip(tables, _live_rows(db, tables)) if rows == 0]
    _renew(db, meta, emptied, tables)


def _renew(db: Database, meta: TensorMeta, emptied: list[str], tables: list[str]) -> None:
    """Parts (of `tables`, all of them) without live tiles are dropped, the first made anew: DuckDB keeps
    deleted rows in a table until it rewrites it, and rewriting them together with new ones could take
    more than its memory."""
    everything = set(emptied) == set(tables)
    for table in emptied:
        tile_parts.forget(db, meta.table)
        if table == meta.table:
            create_tile_table(db, table, len(meta.keys), replace=True)
            tile_parts.created(db, meta.table, table)
        else:
            db.execute(f"DROP TABLE {quote_dotted(table)}")
    if everything:  # one empty part, made by this transaction: its writer need not ask DuckDB
        tile_parts.emptied(db, meta.table)


def existing_keys(db: Database, meta: TensorMeta, keys: np.ndarray) -> list[tuple[int, ...]]:
    """Which of `keys` are already stored."""
    refuse_write(meta)  # its files lie outside the database's transactions
    names = key_columns(len(meta.keys))
    if not names:
        return [()] if db.execute(f"SELECT count(*) FROM {_source(db, meta, ['nnz'])}")[0][0] else []
    probe = pa.table({n: pa.array(np.asarray(keys, dtype=np.int64)[:, d]) for d, n in enumerate(names)})
    on = " AND ".join(f"t.{n} = p.{n}" for n in names)
    rows = db.register_and_run("_trdb_probe", probe,
                               f"SELECT {', '.join('t.' + n for n in names)} FROM {_source(db, meta, names, 't')} "
                               f"JOIN _trdb_probe p ON {on}")
    return [tuple(r) for r in rows]


def value_statistics(db: Database, meta: TensorMeta) -> tuple[int, int, int]:
    """(total non-zeros, CSR tuples, non-zeros in CSR tuples): what of `tile_statistics` a write that keeps the
    keys (an UPDATE) changes, without counting distinct keys (200,000 tiles: 0.9 against 2.9 ms)."""
    row = db.execute(f"SELECT coalesce(sum(nnz), 0), count(*) FILTER (WHERE fmt <> {DENSE}), "
                     f"coalesce(sum(nnz) FILTER (WHERE fmt <> {DENSE}), 0) "
                     f"FROM {_source(db, meta, ['nnz', 'fmt'])}")[0]
    nnz, csr_tuples, csr_nnz = (int(x) for x in row)
    return nnz, csr_tuples, csr_nnz


def tile_statistics(db: Database, meta: TensorMeta) -> tuple:
    """(tuple count, total non-zeros, CSR tuples, non-zeros in CSR tuples, distinct values per key)."""
    distinct = "".join(f", count(DISTINCT {k})" for k in key_columns(len(meta.keys)))
    row = db.execute(f"SELECT count(*), coalesce(sum(nnz), 0), count(*) FILTER (WHERE fmt <> {DENSE}), "
                     f"coalesce(sum(nnz) FILTER (WHERE fmt <> {DENSE}), 0){distinct} "
                     f"FROM {_source(db, meta, key_columns(len(meta.keys)) + ['nnz', 'fmt'])}")[0]
    counts = tuple(int(x) for x in row)
    return counts[:4] + (counts[4:],)
