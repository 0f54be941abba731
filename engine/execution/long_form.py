"""A tensor result in long form: one (index, ..., value) row per element of each present tile (CSR: stored values)."""
from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from trdb.execution.result import TensorLayout, tile_slices
from trdb.kernels.backend import to_host
from trdb.kernels.sparse import is_sparse, row_indices


def long_names(schema, layout: TensorLayout) -> list[str]:
    """An index column per tensor axis: the key's name where a key maps to the axis, else axis<n>."""
    names = [schema[p].name for p in layout.key_positions]
    return names + [f"axis{n}" for n in range(len(names), len(layout.tile))]


def long_schema(index_names: Sequence[str], value_name: str, dtype: np.dtype) -> pa.Schema:
    return pa.schema([(n, pa.int64()) for n in index_names] + [(value_name, pa.from_numpy_dtype(dtype))])


def long_batch(layout: TensorLayout, rows: Sequence[tuple], schema: pa.Schema) -> pa.RecordBatch:
    """The elements of `rows`' tiles with their indices in the whole tensor; CSR tiles give their non-zeros."""
    rank = len(layout.tile)
    indices: list[list[np.ndarray]] = [[] for _ in range(rank)]
    values: list[np.ndarray] = []
    for row in rows:
        tile = to_host(row[layout.value_position], True)
        starts = [s.start for s in tile_slices(layout, row)] or [0] * rank
        if is_sparse(tile):
            kept = tile.data != 0  # a computed CSR tile may hold explicit zeros
            at = (np.asarray(row_indices(tile))[kept], np.asarray(tile.indices)[kept])
            data = np.asarray(tile.data)[kept]
        else:
            array = np.asarray(tile)
            shape = tuple(s.stop - s.start for s in tile_slices(layout, row)) or ()
            array = array.reshape(shape) if shape else array.reshape(())
            at = np.indices(array.shape).reshape(array.ndim, -1) if array.ndim else ()
            data = array.reshape(-1)
        for axis in range(rank):
            indices[axis].append(np.asarray(at[axis], dtype=np.int64) + starts[axis])
        values.append(data.astype(layout.dtype, copy=False))
    columns = [pa.array(np.concatenate(axis) if axis else np.empty(0, np.int64)) for axis in indices]
    data = np.concatenate(values) if values else np.empty(0, layout.dtype)
    return pa.RecordBatch.from_arrays(columns + [pa.array(data)], schema=schema)


def long_batches(layout: TensorLayout, batches: Iterable[Sequence[tuple]], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    for rows in batches:
        if rows:
            yield long_batch(layout, rows, schema)
