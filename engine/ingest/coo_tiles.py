"""Sorted COO entries into stored tiles: duplicates summed, each tile built dense or CSR as its density says.

The entries arrive sorted by tile key and C-order offset inside the tile, which within a 2-d tile
is row-major order: a CSR tile's values and column indices are the entries as they come, and its
row pointers a count per row. Tiles are built for whole chunks at once with vectorized numpy,
never densified when they are CSR.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import scipy.sparse

from trdb.config.unit_costs import CSR_MAX_DENSITY
from trdb.errors import DataError
from trdb.ingest import tiling
from trdb.storage import tile_store
from trdb.storage.database import Database
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_codec import DENSE, csr_sections, encode_csr_entries, encode_dense_entries


def write_entries(db: Database, meta: TensorMeta, entries: pa.Table) -> int:
    """Store sorted entries (k0.., p, v), summing duplicates; returns the tiles stored."""
    keys = [entries.column(f"k{d}").to_numpy() for d in range(len(meta.keys))]
    merged = _merged(keys, entries.column("p").to_numpy(), entries.column("v").to_numpy(), meta.dtype)
    if merged is None:
        return 0
    keys, position, values = merged
    starts = _run_starts(keys)
    counts = np.diff(np.append(starts, len(values)))
    tile_keys = [key[starts] for key in keys]
    extents = _tile_extents(meta, tile_keys, len(starts))
    elements = np.prod(extents, axis=0)
    csr = counts <= CSR_MAX_DENSITY * elements  # the rule of kernels/sparse.wants_csr, for every tile at once
    csr &= len(meta.tile) == 2 and meta.dtype != np.float16
    itemsize = values.itemsize
    csr_bytes = sum(csr_sections(counts, extents[0] if len(extents) else 0, itemsize, 4))
    for lo, hi in _chunks(np.where(csr, csr_bytes, elements * itemsize)):
        begin, end = starts[lo], starts[lo] + counts[lo:hi].sum()
        chunk = _Chunk(meta, [k[lo:hi] for k in tile_keys], counts[lo:hi], extents[:, lo:hi],
                       position[begin:end], values[begin:end])
        for as_csr in (False, True):
            chunk.write(db, csr[lo:hi] == as_csr, as_csr)
    return len(starts)


def sparse_matrix_entries(meta: TensorMeta, matrix: Any) -> pa.Table:
    """A 2-d scipy.sparse matrix's entries as (k0.., p, v), sorted by tile key and offset (write_entries' input):
    the matrix is stored without being densified."""
    coo = scipy.sparse.coo_array(matrix)
    keys, position = [], np.zeros(coo.nnz, dtype=np.int64)
    for axis, (index, tile, size) in enumerate(zip(coo.coords, meta.tile, meta.shape)):
        index = index.astype(np.int64)
        if axis < len(meta.keys):  # as _entries_sql in coo.py: edge tiles are narrower
            keys.append(index // tile)
            width, local = np.minimum(tile, size - keys[-1] * tile), index % tile
        else:
            width, local = tile, index
        position = position * width + local
    order = _entry_order(meta, keys, position)
    if order is None:  # in order already (a canonical CSR matrix in one column of tiles)
        columns = {f"k{d}": key for d, key in enumerate(keys)}
        columns.update(p=position, v=coo.data)
    else:
        columns = {f"k{d}": key[order] for d, key in enumerate(keys)}
        columns.update(p=position[order], v=coo.data[order])
    return pa.table(columns)


def _entry_order(meta: TensorMeta, keys: list[np.ndarray], position: np.ndarray):
    """The order that sorts entries by tile key, then offset; None when they are sorted. One int64 key (the
    tile's place in the grid, then the offset) where it cannot overflow: argsort of it is about five times
    faster than lexsort (as coo_buckets sorts a bucket)."""
    if len(position) < 2:
        return None
    place = np.zeros(len(position), dtype=np.int64)
    for key, size in zip(keys, meta.grid):
        place = place * size + key
    if math.prod(meta.grid) * math.prod(meta.tile) < 1 << 62:
        combined = place * math.prod(meta.tile) + position
        return None if (combined[1:] >= combined[:-1]).all() else np.argsort(combined)
    return np.lexsort([position, place])


def entry_tile_counts(meta: TensorMeta, entries: pa.Table) -> np.ndarray:
    """Entries in each tile the sorted entries fall in: the non-zeros each will hold at most (duplicates are
    summed and zeros dropped when they are written)."""
    if entries.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    starts = _run_starts([entries.column(f"k{d}").to_numpy() for d in range(len(meta.keys))])
    return np.diff(np.append(starts, entries.num_rows))


def _merged(keys: list[np.ndarray], position: np.ndarray, values: np.ndarray, dtype: np.dtype):
    """(keys, position, values) with duplicates summed, cast to dtype, zeros dropped; None when nothing is left."""
    if len(values) == 0:
        return None
    first = _run_starts([*keys, position])
    if len(first) < len(values):  # duplicate coordinates: one sum per run of equal (key, offset)
        values = np.add.reduceat(values, first)
        keys, position = [key[first] for key in keys], position[first]
    values = _to_dtype(values, dtype)
    kept = values != 0  # explicit zeros and sums that cancel are never stored
    if not kept.all():
        values, position, keys = values[kept], position[kept], [key[kept] for key in keys]
    return (keys, position, values) if len(values) else None


class _Chunk:
    """The tiles of one write chunk: their keys, entry counts, extents and entries (sorted)."""

    def __init__(self, meta: TensorMeta, keys: list[np.ndarray], counts: np.ndarray, extents: np.ndarray,
                 position: np.ndarray, values: np.ndarray):
        self.meta, self.keys, self.counts, self.extents = meta, keys, counts, extents
        self.position, self.values = position, values

    def write(self, db: Database, chosen: np.ndarray, as_csr: bool) -> None:
        """Insert the chosen tiles, all dense or all CSR."""
        if not chosen.any():
            return
        counts, extents, position, values = self.counts, self.extents, self.position, self.values
        if not chosen.all():  # (the usual case is one format for the whole chunk: no copies then)
            entries = np.repeat(chosen, self.counts)
            counts, extents = counts[chosen], extents[:, chosen]
            position, values = position[entries], values[entries]
        if as_csr:
            width = np.repeat(extents[1], counts)
            blobs, fmt = encode_csr_entries(extents[0], counts, position // width, position % width, values,
                                   self.meta.dtype)
        else:
            blobs, fmt = encode_dense_entries(np.prod(extents, axis=0), counts, position, values, self.meta.dtype), DENSE
        tile_store.insert_encoded(db, self.meta, [k[chosen] for k in self.keys], counts,
                                  np.full(len(counts), fmt, dtype=np.int8), blobs)


def _run_starts(columns: list[np.ndarray]) -> np.ndarray:
    """Where a run of equal rows begins (rows sorted on these columns); one run when there are none."""
    count = len(columns[0]) if columns else 1
    change = np.zeros(count, dtype=bool)
    change[0] = True
    for column in columns:
        change[1:] |= column[1:] != column[:-1]
    return np.flatnonzero(change)


def _to_dtype(sums: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "b":
        return sums != 0
    if dtype.kind in "iu":
        if sums.dtype.kind == "f":
            sums = np.rint(sums)
        info = np.iinfo(dtype)
        bad = ~((sums >= info.min) & (sums <= info.max))  # NaN and infinities are bad too
        if bad.any():
            raise DataError(f"a value sums to {format_number(sums[bad][0].item())}, which does not fit DTYPE {dtype}")
    elif dtype.kind == "f" and sums.dtype.itemsize > dtype.itemsize:
        bad = np.isfinite(sums) & (np.abs(sums) > np.finfo(dtype).max)  # would become inf
        if bad.any():
            raise DataError(f"a value sums to {format_number(sums[bad][0].item())}, which overflows DTYPE {dtype} "
                            f"(it would become inf)", hint="give DTYPE float64 to keep it")
    return sums.astype(dtype)


def _tile_extents(meta: TensorMeta, tile_keys: list[np.ndarray], count: int) -> np.ndarray:
    """Extent of each tile along each axis (axes x tiles): edge tiles are smaller."""
    extents = np.empty((len(meta.tile), count), dtype=np.int64)
    for axis, (tile, size) in enumerate(zip(meta.tile, meta.shape)):
        extents[axis] = np.minimum(tile, size - tile_keys[axis] * tile) if axis < len(tile_keys) else tile
    return extents


def _chunks(tile_bytes: np.ndarray) -> list[tuple[int, int]]:
    """Ranges of tiles of about CHUNK_BYTES each, so memory stays bounded for large tensors."""
    before = np.cumsum(tile_bytes) - tile_bytes
    bounds = np.flatnonzero(np.diff(before // tiling.CHUNK_BYTES)) + 1
    edges = [0, *bounds.tolist(), len(tile_bytes)]
    return list(zip(edges[:-1], edges[1:]))


def format_number(value: Any) -> str:
    """A number as a message shows it: integral floats without '.0'."""
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return str(int(value))
    return str(value)
