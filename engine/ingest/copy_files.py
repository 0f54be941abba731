"""The files COPY writes and reads: Parquet in tile or long form, CSV in long form, npy; written batch by batch.

Tile form, one row per tile: the key columns (int64), the tile as Arrow's `fixed_shape_tensor` of the
nominal tile shape (edge tiles zero-padded; CSR tiles densified) and, where edge tiles can be smaller,
`<value>_shape` (list<int64>) with each tile's own shape: the layout `fetch_arrow()` gives. Long form:
one int64 column per axis and the value column, one row per element of each present tile (CSR tiles:
their non-zeros). npy: the whole dense array (absent tiles are zeros), each tile written into its place
through a memory map, so only a batch of tiles is in memory at a time.
"""
from __future__ import annotations

import errno
import json
import mmap
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from trdb.errors import DataError, OperationalError
from trdb.execution.column_batch import is_columns
from trdb.execution.long_form import long_batch, long_names, long_schema
from trdb.execution.result import TensorLayout, tile_slices
from trdb.kernels.backend import to_host
from trdb.kernels.sparse import is_sparse

# The Parquet metadata key of the tensor's layout: {"shape": [...], "tile": [...]} as JSON, so that
# CREATE TENSOR name FROM 'file.parquet' knows the whole shape, absent tiles and all
LAYOUT_KEY = b"trdb.layout"


def with_layout(schema: pa.Schema, layout: TensorLayout) -> pa.Schema:
    text = json.dumps({"shape": [int(n) for n in layout.shape], "tile": [int(n) for n in layout.tile]})
    return schema.with_metadata({**(schema.metadata or {}), LAYOUT_KEY: text.encode()})


def tile_schema(key_names: Sequence[str], value_name: str, layout: TensorLayout, ragged: bool) -> pa.Schema:
    fields = [pa.field(n, pa.int64()) for n in key_names]
    fields.append(pa.field(value_name, pa.fixed_shape_tensor(pa.from_numpy_dtype(layout.dtype), list(layout.tile))
                           if layout.tile else pa.from_numpy_dtype(layout.dtype)))
    if ragged:
        fields.append(pa.field(f"{value_name}_shape", pa.list_(pa.int64())))
    return with_layout(pa.schema(fields), layout)


def _dense(tile, dtype: np.dtype) -> np.ndarray:
    tile = to_host(tile, True)
    return np.asarray(tile.toarray() if is_sparse(tile) else tile, dtype=dtype)


def tile_batch(layout: TensorLayout, rows: Sequence[tuple], schema: pa.Schema) -> pa.RecordBatch:
    """Rows of a tensor result as a tile-form batch (edge tiles zero-padded to the nominal tile)."""
    if is_columns(rows) and rows.is_tile[layout.value_position] and len(schema) == len(layout.key_positions) + 1:
        stack = rows.columns[layout.value_position]
        if layout.tile and stack.shape[1:] == tuple(layout.tile):  # full tiles stacked: the batch as it is
            keys = [pa.array(rows.columns[p], pa.int64()) for p in layout.key_positions]
            tiles = np.ascontiguousarray(stack, dtype=layout.dtype)
            return pa.RecordBatch.from_arrays(keys + [pa.FixedShapeTensorArray.from_numpy_ndarray(tiles)], schema=schema)
    keys = [pa.array([row[p] for row in rows], pa.int64()) for p in layout.key_positions]
    tiles = [_dense(row[layout.value_position], layout.dtype) for row in rows]
    if not layout.tile:
        columns = keys + [pa.array(np.array([t.reshape(()) for t in tiles], dtype=layout.dtype))]
    else:
        stacked = np.zeros((len(tiles),) + tuple(layout.tile), dtype=layout.dtype)
        for target, tile in zip(stacked, tiles):
            tile = tile.reshape(tile.shape[-len(layout.tile):] if tile.ndim >= len(layout.tile) else
                                (1,) * (len(layout.tile) - tile.ndim) + tile.shape)
            target[tuple(slice(0, n) for n in tile.shape)] = tile
        columns = keys + [pa.FixedShapeTensorArray.from_numpy_ndarray(stacked)]
    if len(schema) > len(columns):
        columns.append(pa.array([list(t.shape) for t in tiles], pa.list_(pa.int64())))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def write_parquet(path: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> int:
    with pq.ParquetWriter(path, schema) as writer:
        return _write_batches(writer, batches)


def write_csv(path: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> int:
    with pa_csv.CSVWriter(path, schema) as writer:
        return _write_batches(writer, batches)


def _write_batches(writer, batches: Iterable[pa.RecordBatch]) -> int:
    """Each batch through the writer as it comes; the rows written."""
    count = 0
    for batch in batches:
        writer.write_batch(batch)
        count += batch.num_rows
    return count


def write_npy(path: str, layout: TensorLayout, batches: Iterable[Sequence[tuple]]) -> int:
    """The whole dense array, tile by tile into a memory map of the file (a new file reads as zeros)."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=layout.dtype, shape=layout.shape)
    _reserve(path)
    count = 0
    try:
        for rows in batches:
            for row in rows:
                where = tile_slices(layout, row)
                if any(s.stop > n for s, n in zip(where, layout.shape)):
                    raise DataError(f"the tile under key {tuple(row[p] for p in layout.key_positions)} falls "
                                    f"outside the shape {layout.shape}")
                target = out[where or ...]
                target[...] = _dense(row[layout.value_position], layout.dtype).reshape(target.shape)
                count += 1
            out.flush()  # the pages go to the file, then are let go: what is resident stays one batch of tiles
            _drop_pages(out)
    finally:
        del out
    return count


def _reserve(path: str) -> None:
    """The file's blocks taken on the disk now: a memory map of a sparse file on a full disk dies of SIGBUS at
    the first page that cannot be written, where this is an OSError (ENOSPC) to report."""
    if not hasattr(os, "posix_fallocate"):
        return
    with open(path, "r+b") as file:
        try:
            os.posix_fallocate(file.fileno(), 0, os.fstat(file.fileno()).st_size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise  # ENOSPC, EDQUOT, EIO: the write cannot succeed


@contextmanager
def file_errors(path: str, file_format: str, writing: bool) -> Iterator[None]:
    """What pyarrow and the system raise about a file COPY reads or writes, as the trdb error that says so."""
    try:
        yield
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        if writing:
            raise
        raise DataError(f"'{path}' is not a {file_format} file COPY can read: {str(exc).splitlines()[0][:300]}",
                        hint="COPY ... FROM reads the Parquet, CSV and npy files COPY ... TO writes; the format comes "
                             "from the file's name, or FORMAT parquet | csv | npy") from None
    except OSError as exc:
        raise system_error(exc, path, writing) from None


def system_error(exc: OSError, path: str, writing: bool) -> OperationalError:
    """An OSError of a file as an OperationalError: a full disk says so, with what to do."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        elsewhere = ", or COPY to another disk" if writing else ""
        return OperationalError(f"no space left on the disk while {'writing' if writing else 'reading'} '{path}' "
                                f"({exc.strerror or exc})",
                                hint=f"free space on the disk{elsewhere}; the statement changed nothing")
    return OperationalError(f"cannot {'write' if writing else 'read'} '{path}': {exc.strerror or exc}")


def _drop_pages(array: np.memmap) -> None:
    mapping = getattr(array, "_mmap", None)
    if mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
        mapping.madvise(mmap.MADV_DONTNEED)  # clean after the flush: dropping them loses nothing


def long_form_batches(layout: TensorLayout, names: Sequence[str], value_name: str,
                      batches: Iterable[Sequence[tuple]]) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    schema = with_layout(long_schema(names, value_name, layout.dtype), layout)
    return schema, (long_batch(layout, rows, schema) for rows in batches if rows)


def index_names(schema, layout: TensorLayout) -> list[str]:
    return long_names(schema, layout)


def read_tile_batches(path: str, key_names: Sequence[str], value_name: str,
                      batch_rows: int = 256) -> Iterator[tuple[np.ndarray, list[np.ndarray]]]:
    """A tile-form Parquet file, batch by batch: keys (n x k int64) and each tile cut to its own shape."""
    source = pq.ParquetFile(path)
    names = source.schema_arrow.names
    missing = [n for n in list(key_names) + [value_name] if n not in names]
    if missing:
        raise DataError(f"'{path}' has no column {missing[0]!r} (it has {', '.join(names)})",
                        hint="COPY ... FROM reads the files COPY ... TO writes")
    shape_name = f"{value_name}_shape" if f"{value_name}_shape" in names else None
    columns = list(key_names) + [value_name] + ([shape_name] if shape_name else [])
    _check_tile_columns(path, source.schema_arrow, key_names, value_name, shape_name)
    for batch in source.iter_batches(batch_size=batch_rows, columns=columns):
        if any(batch.column(n).null_count for n in columns):
            raise DataError(f"'{path}' has a NULL key, tile or tile shape", hint="COPY ... FROM reads the files "
                            "COPY ... TO writes")
        keys = np.stack([_key_column(path, batch.column(n)) for n in key_names], axis=1) \
            if key_names else np.empty((batch.num_rows, 0), np.int64)
        column = batch.column(value_name)
        tiles = column.to_numpy_ndarray() if isinstance(column.type, pa.FixedShapeTensorType) else \
            column.to_numpy(zero_copy_only=False)
        if shape_name:
            tiles = [_cut(path, t, s) for t, s in zip(tiles, batch.column(shape_name).to_pylist())]
        yield keys, [np.asarray(t) for t in tiles]


def _key_column(path: str, column: pa.Array) -> np.ndarray:
    keys = column.to_numpy(zero_copy_only=False)
    if keys.dtype == np.uint64 and len(keys) and keys.max() > np.iinfo(np.int64).max:
        raise DataError(f"'{path}' has a key of {int(keys.max())}, past BIGINT's range")
    return keys.astype(np.int64)


def _check_tile_columns(path: str, schema: pa.Schema, key_names: Sequence[str], value_name: str,
                        shape_name: Optional[str]) -> None:
    """Integer keys, a tile column of numbers and a list<int> of edge shapes: what COPY ... TO writes."""
    for name in key_names:
        if not pa.types.is_integer(schema.field(name).type):
            raise DataError(f"'{path}': the key column {name!r} holds {schema.field(name).type}, not integers",
                            hint="COPY ... FROM reads the files COPY ... TO writes")
    value = schema.field(value_name).type
    element = value.value_type if isinstance(value, pa.FixedShapeTensorType) else value
    if not (pa.types.is_integer(element) or pa.types.is_floating(element) or pa.types.is_boolean(element)):
        raise DataError(f"'{path}': the tile column {value_name!r} holds {value}, not numbers")
    if shape_name and not (pa.types.is_list(schema.field(shape_name).type) and
                           pa.types.is_integer(schema.field(shape_name).type.value_type)):
        raise DataError(f"'{path}': the column {shape_name!r} holds {schema.field(shape_name).type}, not a list of "
                        "integers (each tile's own shape)")


def _cut(path: str, tile: np.ndarray, shape: list) -> np.ndarray:
    """An edge tile cut from its zero-padded nominal tile to its own shape, which must fit inside it."""
    if len(shape) != tile.ndim or not all(0 <= n <= t for n, t in zip(shape, tile.shape)):
        raise DataError(f"'{path}' gives a tile of shape {tuple(tile.shape)} the shape {tuple(shape)}, which does not "
                        "fit inside it")
    return tile[tuple(slice(0, n) for n in shape)]


def read_long_batches(path: str, file_format: str, batch_rows: int = 1 << 16) -> Iterator[pa.RecordBatch]:
    if file_format == "parquet":
        yield from pq.ParquetFile(path).iter_batches(batch_size=batch_rows)
        return
    with pa_csv.open_csv(path) as reader:
        yield from reader


def is_tile_form(path: str) -> bool:
    """Whether a Parquet file holds tiles (a fixed_shape_tensor column) rather than long-form rows."""
    return any(isinstance(f.type, pa.FixedShapeTensorType) for f in pq.read_schema(path))


def replace_file(temporary: str, path: str) -> None:
    os.replace(temporary, path)


def temporary_path(path: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.trdb-{os.getpid()}.tmp")


def remove_quietly(path: Optional[str]) -> None:
    if path and os.path.lexists(path):  # a dangling link too
        os.remove(path)


def long_columns(path: str, file_format: str) -> list[str]:
    """The column names of a long-form file: index columns, then the value column."""
    if file_format == "parquet":
        return pq.read_schema(path).names
    with pa_csv.open_csv(path) as reader:
        return reader.schema.names


@dataclass(frozen=True)
class TileForm:
    """What a tile-form Parquet file says of its tensor: key and value columns, tile, dtype, and the shape its
    layout metadata records (None: a file without it, written before COPY recorded it or by another tool)."""

    key_names: tuple[str, ...]
    value_name: str
    tile: tuple[int, ...]
    dtype: np.dtype
    shape: Optional[tuple[int, ...]]


def recorded_layout(path: str) -> Optional[dict]:
    """The {"shape", "tile"} COPY recorded in a Parquet file's metadata, if it did (and they are lists of ints)."""
    text = (pq.read_schema(path).metadata or {}).get(LAYOUT_KEY)
    try:
        layout = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(layout, dict) or not all(isinstance(layout.get(k), list) and all(
            isinstance(n, int) and n >= 0 for n in layout[k]) for k in ("shape", "tile")):
        return None
    return layout


def tile_form(path: str) -> TileForm:
    """The columns and layout of a tile-form Parquet file: integer keys, then the fixed_shape_tensor tile column."""
    schema = pq.read_schema(path)
    value = next(f for f in schema if isinstance(f.type, pa.FixedShapeTensorType))
    keys = tuple(f.name for f in schema if pa.types.is_integer(f.type))
    _check_tile_columns(path, schema, keys, value.name, None)
    tile = tuple(int(n) for n in value.type.shape)
    layout = recorded_layout(path)
    shape = tuple(layout["shape"]) if layout and len(layout["shape"]) == len(tile) else None
    return TileForm(keys, value.name, tile, np.dtype(value.type.value_type.to_pandas_dtype()), shape)


def tile_extent(path: str, form: TileForm) -> tuple[int, ...]:
    """The smallest shape that holds every tile of the file (where each ends along each axis); the tile's own
    size along axes no key cuts. A pass over the keys and edge shapes only."""
    extent = [0] * len(form.key_names)
    shape_name = f"{form.value_name}_shape"
    has_shapes = shape_name in pq.read_schema(path).names
    columns = list(form.key_names) + ([shape_name] if has_shapes else [])
    for batch in pq.ParquetFile(path).iter_batches(batch_size=1 << 16, columns=columns or None):
        for axis, name in enumerate(form.key_names):
            keys = _key_column(path, batch.column(name))
            if not len(keys):
                continue
            if keys.min() < 0:
                raise DataError(f"'{path}' has the negative key {int(keys.min())} in column {name!r}")
            last = int(keys.max())  # a tile's end grows with its key: the last key's tiles end furthest
            size = form.tile[axis]
            if has_shapes:
                shapes = batch.column(shape_name).to_pylist()
                size = max(s[axis] if s and len(s) > axis else size for s, k in zip(shapes, keys.tolist()) if k == last)
            extent[axis] = max(extent[axis], last * form.tile[axis] + int(size))  # Python ints: no wrap-around
    return tuple(extent) + form.tile[len(form.key_names):]


def index_extent(path: str, file_format: str, indices: Sequence[str]) -> Optional[tuple[int, ...]]:
    """1 + the largest value of each index column of a long-form file, read batch by batch (None when a column is
    not all whole numbers at least 0, or the file cannot be read: the caller is making a hint)."""
    largest = [-1] * len(indices)
    try:
        for batch in read_long_batches(path, file_format):
            for axis, name in enumerate(indices):
                column = batch.column(name)
                if not (pa.types.is_integer(column.type) and column.null_count == 0):
                    return None
                if len(column):
                    largest[axis] = max(largest[axis], int(pc.max(column).as_py()))
    except (pa.ArrowException, OSError, KeyError):
        return None
    return tuple(n + 1 for n in largest) if all(n >= 0 for n in largest) else None
