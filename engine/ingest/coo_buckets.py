"""COO entries sorted by tile out of core: streamed from DuckDB into buckets of whole tiles (spill files past
the memory budget), then each bucket sorted in numpy and handed on as one batch.

A bucket sort, not DuckDB's ORDER BY: the tile counts are known first, so the buckets are ranges of
tiles cut to a size that fits, and the entries are written once and read once. Within a small
memory_limit DuckDB sorts in one thread in its own small part of the budget; 40M entries took
70 s of a 155 s load at 256MB there.
"""
from __future__ import annotations

import math
from typing import Callable, Iterator, Optional

import numpy as np
import pyarrow as pa

from trdb.errors import QueryCancelled
from trdb.storage import coo_staging
from trdb.storage.database import Database
from trdb.storage.spill import SpillFile
from trdb.storage.tensor_meta import TensorMeta

MAX_BUCKETS = 256          # spill files open at once; past this a bucket holds more than `per_bucket` entries
READ_ROWS = 1 << 20        # entries per batch streamed out of DuckDB (at most, and at most a bucket's worth)
LOOKUP_PLACES = 1 << 20    # grids up to this many tiles find an entry's bucket in a table by place (2 MB)


def sorted_entry_batches(db: Database, meta: TensorMeta, exact: bool, per_bucket: int,
                         cancelled: Callable[[], bool],
                         counts: Optional[tuple[np.ndarray, np.ndarray]] = None) -> Iterator[pa.Table]:
    """The staged entries as tables (k0.., p, v) sorted by tile and offset, each a range of whole tiles of
    about `per_bucket` entries (a tile with more is a bucket alone); `counts`: staged_tile_counts, when
    the caller has them."""
    places, counts = counts if counts is not None else coo_staging.staged_tile_counts(db, meta)
    if not len(places):
        return
    firsts = _bucket_firsts(places, counts, per_bucket)
    rows = max(1, min(READ_ROWS, per_bucket))
    if len(firsts) == 1:  # it fits: no spill
        yield _sorted(meta, list(_checked(coo_staging.staged_entry_batches(db, meta, exact, rows), cancelled)))
        return
    files = [db.file.spill.new_file("coo") for _ in firsts]
    lookup = _bucket_lookup(meta, firsts)
    try:
        for batch in _checked(coo_staging.staged_entry_batches(db, meta, exact, rows), cancelled):
            _scatter(batch, firsts, files, lookup)
        for file in files:
            if cancelled():
                raise QueryCancelled(f"the statement was cancelled while it wrote the tiles of {meta.name}")
            yield _sorted(meta, [_columns_batch(meta, row) for row in file])
            file.remove()
    finally:
        for file in files:
            file.remove()


def _bucket_firsts(places: np.ndarray, counts: np.ndarray, per_bucket: int) -> np.ndarray:
    """The first tile place of each bucket: consecutive tiles of about `per_bucket` entries together, and
    at most MAX_BUCKETS buckets."""
    total = int(counts.sum())
    per_bucket = max(per_bucket, -(-total // MAX_BUCKETS))
    firsts, held = [0], 0
    for index, count in enumerate(counts.tolist()):
        if held and held + count > per_bucket:
            firsts.append(index)
            held = 0
        held += count
    return places[np.asarray(firsts)]


def _checked(batches: Iterator[pa.RecordBatch], cancelled: Callable[[], bool]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        if cancelled():
            raise QueryCancelled("the statement was cancelled while it read the COO entries")
        yield batch


def _bucket_lookup(meta: TensorMeta, firsts: np.ndarray) -> Optional[np.ndarray]:
    """Each tile place's bucket, indexed by place, where the grid is small enough (LOOKUP_PLACES): a gather
    is about 40x faster than a binary search of every entry. None otherwise."""
    if meta.max_tuples > LOOKUP_PLACES:
        return None
    return (np.searchsorted(firsts, np.arange(meta.max_tuples), side="right") - 1).astype(np.int16)


def _scatter(batch: pa.RecordBatch, firsts: np.ndarray, files: list[SpillFile],
             lookup: Optional[np.ndarray] = None) -> None:
    """Append each entry of the batch to its bucket's file, as one row of column arrays per bucket."""
    columns = [column.to_numpy() for column in batch.columns]
    if lookup is not None:
        bucket = lookup[columns[0]]
    else:  # int16 (MAX_BUCKETS fits): numpy's stable sort of 16-bit integers is a radix sort, 8x faster
        bucket = (np.searchsorted(firsts, columns[0], side="right") - 1).astype(np.int16)
    order = np.argsort(bucket, kind="stable")
    bucket = bucket[order]
    columns = [column[order] for column in columns]  # one gather a column; each bucket's rows are then slices
    edges = np.flatnonzero(np.diff(bucket)) + 1
    for lo, hi in zip(np.concatenate(([0], edges)), np.concatenate((edges, [len(bucket)]))):
        files[bucket[lo]].write([tuple(column[lo:hi] for column in columns)])


def _columns_batch(meta: TensorMeta, row: tuple) -> pa.RecordBatch:
    names = ["t"] + [f"k{d}" for d in range(len(meta.keys))] + ["p", "v"]
    return pa.record_batch(list(row), names=names)


def _sorted(meta: TensorMeta, batches: list[pa.RecordBatch]) -> pa.Table:
    """One bucket's entries as (k0.., p, v), sorted by tile place and offset (duplicates adjacent)."""
    table = pa.Table.from_batches(batches).combine_chunks()
    place, offset = table.column("t").to_numpy(), table.column("p").to_numpy()
    first, span, tile_size = int(place.min()), int(place.max() - place.min()) + 1, math.prod(meta.tile)
    if span * tile_size < 1 << 62:  # one int64 key: argsort is five times faster than lexsort
        order = np.argsort((place - first) * tile_size + offset)
    else:
        order = np.lexsort((offset, place))
    return table.drop_columns(["t"]).take(order)
