"""Tiles as little-endian bytes in Arrow binary columns (dense or CSR), encoded and decoded without per-value Python.

A dense tile is its values in C order. A CSR tile (format CSR32 or CSR64, the width of its index
arrays) is three sections, each padded to 8 bytes so the next one stays aligned: the stored values
(nnz), the column indices (nnz) and the row pointers (rows + 1). The tile's shape and dtype come
from the catalog, its format and nnz from the tile table's columns.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional, Sequence, Union

import numpy as np
import pyarrow as pa

from trdb.errors import DataError
from trdb.kernels.axis_reductions import any_in_rows
from trdb.kernels.sparse import count_nonzero, is_sparse, make_csr, wants_csr
from trdb.storage.tile_checks import CorruptTile, as_counts, check_csr, check_rows, tile_shapes
from trdb.storage.tile_runs import MIN_RUN, TileRuns, tile_views

DENSE, CSR32, CSR64 = 0, 1, 2
_INDEX_DTYPES = {CSR32: np.dtype("<i4"), CSR64: np.dtype("<i8")}


def little_endian(dtype: np.dtype) -> np.dtype:
    return np.dtype(dtype).newbyteorder("<") if np.dtype(dtype).itemsize > 1 else np.dtype(dtype)


def padded(nbytes):
    """Bytes rounded up to a multiple of 8 (ints or int arrays)."""
    return (nbytes + 7) // 8 * 8


def csr_sections(nnz, rows, itemsize: int, index_size: int) -> tuple:
    """Byte sizes of the three padded sections of CSR tiles: values, column indices, row pointers."""
    return padded(nnz * itemsize), padded(nnz * index_size), padded((rows + 1) * index_size)


def tile_format(tile) -> int:
    if not is_sparse(tile):
        return DENSE
    small = max(tile.nnz, tile.shape[1], tile.shape[0] + 1) < 2 ** 31
    return CSR32 if small else CSR64


def encode_tiles(tiles: Sequence, dtype: np.dtype) -> tuple[pa.Array, np.ndarray]:
    """One large_binary Arrow array holding each tile (a dense array or a canonical CSR tile), and the formats."""
    stored = little_endian(dtype)
    formats = np.fromiter((tile_format(t) for t in tiles), dtype=np.int8, count=len(tiles))
    sizes = np.fromiter((_encoded_size(t, f, stored) for t, f in zip(tiles, formats.tolist())),
                        dtype=np.int64, count=len(tiles))
    offsets = np.zeros(len(tiles) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if len(tiles) == 1 and formats[0] == DENSE:
        whole = np.asarray(tiles[0])
        if whole.dtype == stored and whole.flags.c_contiguous:  # its bytes are the blob: no copy (a 4 MB tile: 0.6 ms)
            return binary_array(offsets, whole.reshape(-1).view(np.uint8)), formats
    # a dense tile's bytes are written whole; CSR sections may leave bytes between them, which are zeros
    allocate = np.empty if (formats == DENSE).all() else np.zeros
    data = allocate(int(offsets[-1]), dtype=np.uint8)
    for tile, fmt, start, end in zip(tiles, formats.tolist(), offsets[:-1].tolist(), offsets[1:].tolist()):
        if fmt == DENSE:
            data[start:end].view(stored)[:] = np.asarray(tile).ravel()
        else:
            _write_csr(data[start:end], tile, stored, _INDEX_DTYPES[fmt])
    return binary_array(offsets, data), formats


def encode_dense_batch(tiles: Sequence, dtype: np.dtype) -> Optional[tuple[pa.Array, np.ndarray, np.ndarray]]:
    """`stored_form` and `encode_tiles` at once for a batch of dense host arrays already in the stored
    dtype, none of which the density rule stores CSR: (the tiles' blobs, their formats, their non-zeros),
    or None for any other batch. Tiles of one shape are stacked into one buffer
    by one call (many small tiles: about 5 us a tile less than encoding each)."""
    stored = little_endian(dtype)
    if len(tiles) < 2 or any(type(tile) is not np.ndarray or tile.dtype != stored for tile in tiles):
        return None
    nonzeros = np.fromiter(map(count_nonzero, tiles), dtype=np.int64, count=len(tiles))
    shapes = [tile.shape for tile in tiles]
    if any(wants_csr(shape, nnz, stored) for shape, nnz in set(zip(shapes, nonzeros.tolist())) if nnz):
        return None
    sizes = np.fromiter((tile.size for tile in tiles), dtype=np.int64, count=len(tiles)) * stored.itemsize
    offsets = np.zeros(len(tiles) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if len(set(shapes)) == 1:
        data = _joined(tiles).reshape(-1).view(np.uint8)
    else:  # edge tiles: each copied into its place
        data = np.empty(int(offsets[-1]), dtype=np.uint8)
        for tile, start, end in zip(tiles, offsets[:-1].tolist(), offsets[1:].tolist()):
            data[start:end].view(stored).reshape(tile.shape)[...] = tile
    return binary_array(offsets, data), np.zeros(len(tiles), np.int8), nonzeros


def encode_stack(stack: np.ndarray, dtype: np.dtype) -> Optional[tuple[pa.Array, np.ndarray, np.ndarray]]:
    """`encode_dense_batch` for tiles of one shape stacked in one array `(n, *tile)` of the stored dtype,
    with no Python step per tile: the blobs are views of the stack's buffer. None where the density rule
    stores some tile CSR (or the stack is not in the stored dtype)."""
    stored = little_endian(dtype)
    if type(stack) is not np.ndarray or stack.dtype != stored or stack.ndim < 1 or len(stack) == 0:
        return None
    flat = np.ascontiguousarray(stack).reshape(len(stack), -1)
    nonzeros = stack_nonzeros(flat)
    present = nonzeros[nonzeros > 0]  # an all-zero tile is stored dense
    if present.size and wants_csr(stack.shape[1:], int(present.min()), stored):
        return None
    offsets = np.arange(len(stack) + 1, dtype=np.int64) * (flat.shape[1] * stored.itemsize)
    return binary_array(offsets, flat.reshape(-1).view(np.uint8)), np.zeros(len(stack), np.int8), nonzeros


def stack_nonzeros(flat: np.ndarray) -> np.ndarray:
    """Each row's non-zeros (rows: the tiles of a stack, flattened), counted as `count_nonzero` counts them."""
    if flat.dtype.kind in "fc":  # as count_nonzero: the size less the zeros is the faster count of floats
        return flat.shape[1] - np.count_nonzero(flat == 0, axis=1).astype(np.int64)
    return np.count_nonzero(flat, axis=1).astype(np.int64)


def _joined(tiles: Sequence[np.ndarray]) -> np.ndarray:
    """Tiles of one shape one after another in one buffer: the buffer they already lie in so (no copy: a
    MINIMIZE step writes its new tiles that way), else a stacked copy."""
    base = one_buffer(tiles)
    return base if base is not None else np.stack(tiles)


def one_buffer(tiles: Sequence[np.ndarray]) -> Optional[np.ndarray]:
    """The one C-contiguous buffer (of any dtype: a read's bytes) that numpy tiles of one shape and dtype are
    views of, back to back in their order and filling it, or None where they are not."""
    if not tiles or type(tiles[0]) is not np.ndarray:
        return None
    base, size = tiles[0].base, tiles[0].nbytes
    if isinstance(base, np.ndarray) and base.flags.c_contiguous and base.nbytes == len(tiles) * size \
            and all(type(tile) is np.ndarray and tile.base is base and tile.flags.c_contiguous
                    and tile.shape == tiles[0].shape and tile.dtype == tiles[0].dtype for tile in tiles) \
            and [tile.ctypes.data for tile in tiles] == [base.ctypes.data + i * size for i in range(len(tiles))]:
        return base
    return None


def binary_array(offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    """A large_binary Arrow array over one byte buffer and its int64 offsets (no copy)."""
    return pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _encoded_size(tile, fmt: int, stored: np.dtype) -> int:
    if fmt == DENSE:
        return int(np.size(tile)) * stored.itemsize
    return int(sum(csr_sections(tile.nnz, tile.shape[0], stored.itemsize, _INDEX_DTYPES[fmt].itemsize)))


def _write_csr(blob: np.ndarray, tile, stored: np.dtype, index: np.dtype) -> None:
    values, indices, _ = csr_sections(tile.nnz, tile.shape[0], stored.itemsize, index.itemsize)
    blob[:tile.nnz * stored.itemsize].view(stored)[:] = tile.data
    blob[values:values + tile.nnz * index.itemsize].view(index)[:] = tile.indices
    start = values + indices
    blob[start:start + (tile.shape[0] + 1) * index.itemsize].view(index)[:] = tile.indptr


def decode_tiles(column: pa.ChunkedArray, dtype: np.dtype, shapes: Sequence[tuple[int, ...]],
                 formats: Optional[np.ndarray] = None, nonzeros: Optional[np.ndarray] = None, *,
                 name: str = "?", keys: Optional[np.ndarray] = None) -> list:
    """Read-only tiles over an Arrow binary column, one per row: numpy views reshaped to `shapes`, or
    CSR tiles over views of their sections where `formats` says so (then `nonzeros` gives their nnz).
    Every tile is checked against its shape, format and nnz first: a bad one is a DataError naming
    tensor `name` and the tile's key (the row of `keys`)."""
    with _named(name, keys):
        rows = _CheckedRows(column, dtype, shapes, formats, nonzeros)
        return _decoded_rows(rows, dtype, shapes, _runs_of_chunks(rows, dtype, shapes))


def decode_stacks(column: pa.ChunkedArray, dtype: np.dtype, shapes: Sequence[tuple[int, ...]],
                  formats: Optional[np.ndarray] = None, nonzeros: Optional[np.ndarray] = None, *,
                  name: str = "?", keys: Optional[np.ndarray] = None) -> Union[tuple[tuple[int, np.ndarray], ...], list]:
    """`decode_tiles`' runs (start, stack) as a tuple, where every tile lies in one: read-only stacks `(n, *tile)`
    over the column's bytes, checked as decode_tiles checks them, with no view of each tile (a read of 200,000
    tiles of 8 x 8 made them in about 25 of 110 ms); where some tile lies in none, the tiles as decode_tiles
    gives them (a list), checked once."""
    with _named(name, keys):
        rows = _CheckedRows(column, dtype, shapes, formats, nonzeros)
        runs = _runs_of_chunks(rows, dtype, shapes)
        if rows.stored == np.dtype(dtype) and sum(len(stack) for chunk in runs for _, stack in chunk) == len(shapes):
            return tuple(run for chunk in runs for run in chunk)
        return _decoded_rows(rows, dtype, shapes, runs)


def _runs_of_chunks(rows: "_CheckedRows", dtype: np.dtype, shapes: Sequence[tuple[int, ...]]) -> list[list]:
    """Each chunk's runs of stacked dense tiles (none where the stored bytes are not `dtype`'s: they are cast)."""
    if rows.stored != np.dtype(dtype):
        return [[] for _ in rows.chunks]
    runs: list[list] = []
    first = 0
    for offsets, data in rows.chunks:
        runs.append(_chunk_runs(offsets, data, rows.formats, rows.new_shape, shapes, first, rows.stored))
        first += len(offsets) - 1
    return runs


@contextmanager
def _named(name: str, keys: Optional[np.ndarray]) -> Iterator[None]:
    """A CorruptTile becomes a DataError naming tensor `name` and the tile's key (the row of `keys`)."""
    try:
        yield
    except CorruptTile as exc:
        key = tuple(keys[exc.row].tolist()) if keys is not None and exc.row < len(keys) else f"#{exc.row}"
        raise DataError(f'tensor "{name}" has a corrupt tile at key {key}: {exc.reason}',
                        hint="the database file was changed outside trdb; restore it from a backup, or "
                             f"DROP TENSOR {name} and load it again") from None


class _CheckedRows:
    """A read's column of tiles, every row checked against its shape, format and nnz (a CorruptTile if not):
    its chunks (offsets, bytes), formats, nonzeros, and which rows have another shape than the one before."""

    def __init__(self, column: pa.ChunkedArray, dtype: np.dtype, shapes: Sequence[tuple[int, ...]],
                 formats: Optional[np.ndarray], nonzeros: Optional[np.ndarray]):
        self.stored = little_endian(dtype)
        self.chunks = _chunks(column, len(shapes))
        self.formats = np.zeros(len(shapes), np.int64) if formats is None else as_counts(formats, "fmt")
        self.nonzeros = np.zeros(len(shapes), np.int64) if nonzeros is None else as_counts(nonzeros, "nnz")
        lengths = np.concatenate([np.diff(offsets) for offsets, _ in self.chunks] + [np.zeros(0, np.int64)])
        index_sizes = {fmt: index.itemsize for fmt, index in _INDEX_DTYPES.items()}
        shape_array = tile_shapes(shapes)
        check_rows(self.formats, self.nonzeros, shape_array, lengths, self.stored.itemsize, index_sizes,
                   wants_csr((2, 2), 0, dtype))
        self.new_shape = np.ones(len(shapes), dtype=bool)  # a tile whose shape is not the one before it
        self.new_shape[1:] = any_in_rows(shape_array[1:] != shape_array[:-1])


def _decoded_rows(rows: _CheckedRows, dtype: np.dtype, shapes: Sequence[tuple[int, ...]],
                  runs_of_chunks: list[list]) -> list:
    """The tiles as a TileRuns: views of the chunks' runs (`_runs_of_chunks`), each other tile on its own."""
    stored, chunks, formats, nonzeros = rows.stored, rows.chunks, rows.formats, rows.nonzeros
    tiles: list = []
    csr: list = []  # (row, data, indices, indptr) of CSR tiles, checked together before scipy sees them
    runs: list = []  # (start, stack) of the runs of dense tiles of one shape
    listed: Optional[tuple[list, list]] = None  # formats and nonzeros as lists, made once a tile is no run's
    for (offsets, data), chunk_runs in zip(chunks, runs_of_chunks):
        first, count = len(tiles), len(offsets) - 1
        runs.extend(chunk_runs)
        chunk: list = [None] * count
        alone = np.ones(count, dtype=bool)
        for start, stack in chunk_runs:
            chunk[start - first:start - first + len(stack)] = tile_views(stack)
            alone[start - first:start - first + len(stack)] = False
        singles = np.flatnonzero(alone).tolist()
        if singles and listed is None:
            listed = formats.tolist(), nonzeros.tolist()
        formats_list, nonzeros_list = listed if singles else ([], [])
        bounds = offsets.tolist() if singles else []
        for k in singles:
            n, blob = first + k, data[bounds[k]:bounds[k + 1]]
            if formats_list[n] == DENSE:
                tile = blob.view(stored).reshape(shapes[n])
                chunk[k] = tile if stored == np.dtype(dtype) else tile.astype(dtype)
            else:
                csr.append((n, *_csr_sections(blob, shapes[n], nonzeros_list[n], stored,
                                               _INDEX_DTYPES[formats_list[n]])))
        tiles.extend(chunk)
    _make_csr_tiles(tiles, csr, shapes, nonzeros, dtype)
    return TileRuns(tiles, tuple(runs))


def _chunk_runs(offsets: np.ndarray, data: np.ndarray, formats: np.ndarray, new_shape: np.ndarray,
                shapes: Sequence[tuple[int, ...]], first: int, stored: np.dtype) -> list[tuple[int, np.ndarray]]:
    """(start, stack) of each run of at least MIN_RUN consecutive dense tiles of one shape in a chunk (`new_shape`:
    which tiles of the read have another shape than the one before them): one read-only stack `(n, *tile)`
    over their bytes (their lengths were checked against their shapes)."""
    count = len(offsets) - 1
    if count < 1:
        return []
    dense = formats[first:first + count] == DENSE
    change = new_shape[first:first + count].copy()
    change[0] = True
    change[1:] |= dense[1:] != dense[:-1]
    starts = np.flatnonzero(change)
    runs: list[tuple[int, np.ndarray]] = []
    for start, end in zip(starts.tolist(), np.append(starts[1:], count).tolist()):
        if (end - start >= MIN_RUN or end - start == count) and dense[start]:  # a short run: only a whole chunk
            low, high = int(offsets[start]), int(offsets[end])
            runs.append((first + start, data[low:high].view(stored).reshape(end - start, *shapes[first + start])))
    return runs


def _make_csr_tiles(tiles: list, csr: list, shapes: Sequence[tuple[int, ...]], nonzeros: np.ndarray,
                    dtype: np.dtype) -> None:
    if not csr:
        return
    rows = np.fromiter((c[0] for c in csr), dtype=np.int64, count=len(csr))
    columns = np.fromiter((shapes[n][1] for n in rows.tolist()), dtype=np.int64, count=len(csr))
    check_csr(rows, [c[2] for c in csr], [c[3] for c in csr], nonzeros[rows], columns)
    for n, data, indices, indptr in csr:
        data = data if data.dtype == np.dtype(dtype) else data.astype(dtype)
        tiles[n] = make_csr(data, indices, indptr, (shapes[n][0], shapes[n][1]))


def _chunks(column: pa.ChunkedArray, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per Arrow chunk of the tile column: its rows' byte offsets and its byte buffer (no copies)."""
    if pa.types.is_binary_view(column.type):  # DuckDB's Arrow output under arrow_output_version 1.5: same bytes
        column = column.cast(pa.large_binary())
    if not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        raise CorruptTile(0, f"its tile column holds {column.type}, not bytes")
    if len(column) != count or column.null_count:
        raise CorruptTile(0, "its tile column has NULLs or a row count unlike its keys")
    chunks = []
    for chunk in column.chunks:
        _, offset_buffer, data_buffer = chunk.buffers()
        offset_type = np.int64 if pa.types.is_large_binary(chunk.type) else np.int32
        offsets = np.frombuffer(offset_buffer, dtype=offset_type)[chunk.offset: chunk.offset + len(chunk) + 1]
        data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
        chunks.append((offsets, data))
    return chunks


def _csr_sections(blob: np.ndarray, shape: tuple[int, ...], nnz: int, stored: np.dtype,
                  index: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Views of a CSR tile's values, column indices and row pointers (its length was checked)."""
    values, indices, _ = csr_sections(nnz, shape[0], stored.itemsize, index.itemsize)
    data = blob[:nnz * stored.itemsize].view(stored)
    column_indices = blob[values:values + nnz * index.itemsize].view(index)
    start = values + indices
    return data, column_indices, blob[start:start + (shape[0] + 1) * index.itemsize].view(index)


# ------------------------------------------------------------ many tiles at once, from their entries

def encode_dense_entries(elements: np.ndarray, counts: np.ndarray, position: np.ndarray, values: np.ndarray,
                dtype: np.dtype) -> pa.Array:
    """One binary array of dense tiles: values scattered into a zeroed buffer, tiles back to back."""
    stored = little_endian(dtype)
    offsets = np.zeros(len(elements) + 1, dtype=np.int64)
    np.cumsum(elements, out=offsets[1:])
    buffer = np.zeros(int(offsets[-1]), dtype=stored)
    buffer[np.repeat(offsets[:-1], counts) + position] = values
    return binary_array(offsets * stored.itemsize, buffer.view(np.uint8))


def encode_csr_entries(rows: np.ndarray, counts: np.ndarray, local_rows: np.ndarray, local_cols: np.ndarray,
              values: np.ndarray, dtype: np.dtype) -> tuple[pa.Array, int]:
    """One binary array of CSR tiles from their entries in row-major order, and the format."""
    stored = little_endian(dtype)
    wide = max(int(counts.max()), int(rows.max()) + 1, int(local_cols.max()) + 1) >= 2 ** 31
    fmt, index = (CSR64, np.dtype("<i8")) if wide else (CSR32, np.dtype("<i4"))
    value_bytes, index_bytes, pointer_bytes = csr_sections(counts, rows, stored.itemsize, index.itemsize)
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(value_bytes + index_bytes + pointer_bytes, out=offsets[1:])
    buffer = np.zeros(int(offsets[-1]), dtype=np.uint8)
    within = _positions_within(counts)
    buffer.view(stored)[np.repeat(offsets[:-1] // stored.itemsize, counts) + within] = values
    column_starts = (offsets[:-1] + value_bytes) // index.itemsize
    buffer.view(index)[np.repeat(column_starts, counts) + within] = local_cols
    pointer_starts = (offsets[:-1] + value_bytes + index_bytes) // index.itemsize
    buffer.view(index)[np.repeat(pointer_starts, rows + 1) + _positions_within(rows + 1)] = \
        _row_pointers(rows, counts, local_rows)
    return binary_array(offsets, buffer), fmt


def _positions_within(counts: np.ndarray) -> np.ndarray:
    """0..count-1 for each run of `counts`, concatenated."""
    total = int(counts.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)


def _row_pointers(rows: np.ndarray, counts: np.ndarray, local_rows: np.ndarray) -> np.ndarray:
    """Every tile's row pointers (rows + 1 each), concatenated: a count of entries per row, summed up."""
    row_base = np.cumsum(rows) - rows
    per_row = np.bincount(np.repeat(row_base, counts) + local_rows, minlength=int(rows.sum()))
    cumulative = np.zeros(len(per_row) + 1, dtype=np.int64)
    np.cumsum(per_row, out=cumulative[1:])
    rows_with_end = rows + 1
    global_rows = np.repeat(row_base, rows_with_end) + _positions_within(rows_with_end)
    return cumulative[global_rows] - np.repeat(cumulative[row_base], rows_with_end)
