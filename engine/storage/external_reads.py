"""Reading an external tensor's tiles: one hash partition in bounded reads, the whole tensor, its statistics.

`read_partition` is what a worker calls to scan its own partition (a Ray actor on another node
calls it with the same location and roots): it lists the dataset, opens only the files it needs
and yields keys and read-only tiles a few MB at a time, so a scan holds one read whatever the
dataset's size (a Parquet row group is the unit pyarrow decodes: COPY writes small ones).
"""
from __future__ import annotations

import math
from typing import Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa

from trdb.errors import DataError
from trdb.kernels.axis_reductions import any_in_rows
from trdb.kernels.sparse import count_nonzero
from trdb.storage.external_location import Location
from trdb.storage.external_tensors import Dataset, check_schema, declared_partitions, guarded, list_dataset, open_parquet
from trdb.storage.key_hash import key_hash_array
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_store import sorted_by_key

READ_BYTES = 16 << 20  # one read: as a stored tensor's streamed scan reads
Tiles = tuple[np.ndarray, list]


def read_partition(location: Location, meta: TensorMeta, partition: int = 0, partitions: int = 1,
                   columns: Optional[Sequence[int]] = None, read_bytes: int = READ_BYTES) -> Iterator[Tiles]:
    """The tiles whose key columns `columns` (default: all) hash to `partition` of `partitions`, in reads of
    about `read_bytes`, each sorted by key."""
    yield from read_dataset(list_dataset(location), meta, partition, partitions, columns, read_bytes)


def read_dataset(dataset: Dataset, meta: TensorMeta, partition: int = 0, partitions: int = 1,
                 columns: Optional[Sequence[int]] = None, read_bytes: int = READ_BYTES) -> Iterator[Tiles]:
    everything = tuple(range(len(meta.keys)))
    columns = everything if columns is None else tuple(columns)
    count = _partition_count(dataset, meta)
    rows = max(1, read_bytes // max(1, math.prod(meta.tile) * meta.dtype.itemsize))
    seen: set = set()
    for number in dataset.chosen(partition, partitions, columns == everything, count):
        reader = _FileReader(dataset, number, count, meta)
        for keys, tiles in reader.batches(rows):
            if partitions > 1:
                mine = np.flatnonzero(key_hash_array(keys[:, list(columns)]) % partitions == partition)
                keys, tiles = keys[mine], [tiles[i] for i in mine.tolist()]
            _check_unique(meta, keys, seen, dataset.location.describe(reader.path))
            if len(keys):
                yield sorted_by_key(keys, tiles)


def read_all(dataset: Dataset, meta: TensorMeta) -> Tiles:
    """Every tile of the tensor at once, sorted by key (what the buffer pool keeps)."""
    parts = list(read_dataset(dataset, meta))
    if not parts:
        return np.zeros((0, len(meta.keys)), dtype=np.int64), []
    keys = np.concatenate([k for k, _ in parts])
    return sorted_by_key(keys, [t for _, tiles in parts for t in tiles])


def statistics(location: Location, meta: TensorMeta) -> tuple:
    """(tuple count, non-zeros, CSR tuples, CSR non-zeros, distinct values per key) of the dataset: one pass
    that also checks every tile, as CREATE TENSOR ... LOCATION does."""
    count = nonzeros = 0
    distinct: list[set] = [set() for _ in meta.keys]
    for keys, tiles in read_partition(location, meta):
        count += len(keys)
        nonzeros += sum(count_nonzero(t) for t in tiles)
        for values, column in zip(distinct, keys.T):
            values.update(column.tolist())
    return count, nonzeros, 0, 0, tuple(len(v) for v in distinct)


def _partition_count(dataset: Dataset, meta: TensorMeta) -> int:
    with open_parquet(dataset.location, dataset.files[0]) as first:
        return declared_partitions(dataset.location, dataset.files[0], first.schema_arrow, dataset)


def _check_unique(meta: TensorMeta, keys: np.ndarray, seen: set, where: str) -> None:
    for key in map(tuple, keys.tolist()):
        if key in seen:
            raise DataError(f'tensor "{meta.name}" has more than one tile at key {key} (in \'{where}\')',
                            hint="a tile-form dataset holds one tile per key, as COPY ... TO writes it")
        seen.add(key)


class _FileReader:
    """One Parquet file of the dataset, its schema checked against the tensor when opened."""

    def __init__(self, dataset: Dataset, number: int, count: Optional[int], meta: TensorMeta):
        self.dataset, self.meta, self.count = dataset, meta, count
        self.path, self.part = dataset.files[number], dataset.parts[number]
        location = dataset.location
        self.file = open_parquet(location, self.path)
        self.schema = self.file.schema_arrow
        self.shape_column = check_schema(location, self.path, self.schema, meta)
        if count is not None and declared_partitions(location, self.path, self.schema, dataset) != count:
            raise DataError(f"'{location.describe(self.path)}' states another partition count than the "
                            "dataset's other files")

    def batches(self, rows: int) -> Iterator[Tiles]:
        names = list(self.meta.keys) + [self.meta.value_name] + ([self.shape_column] if self.shape_column else [])
        with self.file:
            batches = guarded(self.dataset.location, lambda: self.file.iter_batches(batch_size=rows, columns=names))
            while True:
                batch = guarded(self.dataset.location, lambda: next(batches, None))
                if batch is None:
                    return
                yield self._tiles(batch)

    def _tiles(self, batch: pa.RecordBatch) -> Tiles:
        meta, where = self.meta, self.dataset.location.describe(self.path)
        if any(batch.column(n).null_count for n in list(meta.keys) + [meta.value_name]):
            raise DataError(f"'{where}' has a NULL key or tile")
        keys = np.stack([batch.column(n).to_numpy().astype(np.int64) for n in meta.keys], axis=1) \
            if meta.keys else np.zeros((batch.num_rows, 0), dtype=np.int64)
        self._check_keys(keys, where)
        column = batch.column(meta.value_name)
        stacked = column.to_numpy_ndarray() if meta.tile else column.to_numpy(zero_copy_only=False)
        stacked.setflags(write=False)
        shapes = batch.column(self.shape_column).to_pylist() if self.shape_column else None
        tiles = []
        for row, key in enumerate(keys.tolist()):
            shape = meta.tile_shape_at(key)
            if shapes is not None and tuple(shapes[row] or ()) != shape:
                raise DataError(f"'{where}': the tile at key {tuple(key)} has shape {shapes[row]}, its place "
                                f"in a tensor of SHAPE {meta.shape} holds {shape}")
            tile = stacked[row] if meta.tile else stacked[row:row + 1].reshape(())
            if shape != tile.shape:  # an edge tile: its own copy, so that the padded batch is not kept for it
                tile = np.ascontiguousarray(tile[tuple(slice(0, n) for n in shape)])
                tile.setflags(write=False)
            tiles.append(tile)  # zeros are values: a tile the dataset holds is present, whatever its values
        return keys, tiles

    def _check_keys(self, keys: np.ndarray, where: str) -> None:
        grid = np.asarray(self.meta.grid, dtype=np.int64)
        outside = np.flatnonzero(any_in_rows((keys < 0) | (keys >= grid))) if keys.shape[1] else []
        if len(outside):
            raise DataError(f'tensor "{self.meta.name}" has a tile at key {tuple(keys[outside[0]].tolist())} in '
                            f"'{where}', outside its tile grid {tuple(grid.tolist())}",
                            hint="declare the dataset's SHAPE in CREATE TENSOR ... LOCATION")
        if self.part is not None:
            wrong = np.flatnonzero(key_hash_array(keys) % self.count != self.part)
            if len(wrong):
                raise DataError(f"'{where}' holds the tile at key {tuple(keys[wrong[0]].tolist())}, which belongs "
                                f"in another part=<p> folder", hint="the dataset was not written by COPY ... PARTITIONS")
