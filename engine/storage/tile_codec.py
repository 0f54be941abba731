"""Tiles as little-endian bytes in Arrow binary columns (dense or CSR), decoded without per-value Python.

A dense tile is its values in C order. A CSR tile (format CSR32 or CSR64, the width of its index
arrays) is three sections, each padded to 8 bytes so the next one stays aligned: the stored values
(nnz), the column indices (nnz) and the row pointers (rows + 1). The tile's shape and dtype come
from the catalog, its format and nnz from the tile table's columns.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import pyarrow as pa

from trdb.kernels.sparse import is_sparse, make_csr

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
    data = np.zeros(int(offsets[-1]), dtype=np.uint8)
    for tile, fmt, start, end in zip(tiles, formats.tolist(), offsets[:-1].tolist(), offsets[1:].tolist()):
        if fmt == DENSE:
            data[start:end].view(stored)[:] = np.asarray(tile).ravel()
        else:
            _write_csr(data[start:end], tile, stored, _INDEX_DTYPES[fmt])
    return binary_array(offsets, data), formats


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
                 formats: Optional[np.ndarray] = None, nonzeros: Optional[np.ndarray] = None) -> list:
    """Read-only tiles over an Arrow binary column, one per row: numpy views reshaped to `shapes`, or
    CSR tiles over views of their sections where `formats` says so (then `nonzeros` gives their nnz)."""
    stored = little_endian(dtype)
    formats = formats.tolist() if formats is not None else [DENSE] * len(shapes)
    nonzeros = nonzeros.tolist() if nonzeros is not None else [0] * len(shapes)
    tiles: list = []
    for chunk in column.chunks:
        _, offset_buffer, data_buffer = chunk.buffers()
        offset_type = np.int64 if pa.types.is_large_binary(chunk.type) else np.int32
        offsets = np.frombuffer(offset_buffer, dtype=offset_type)[chunk.offset: chunk.offset + len(chunk) + 1]
        data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
        for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
            n = len(tiles)
            blob = data[start:end]
            if formats[n] == DENSE:
                tile = blob.view(stored).reshape(shapes[n])
                tiles.append(tile if stored == np.dtype(dtype) else tile.astype(dtype))
            else:
                tiles.append(_read_csr(blob, shapes[n], nonzeros[n], stored, dtype, _INDEX_DTYPES[formats[n]]))
    return tiles


def _read_csr(blob: np.ndarray, shape: tuple[int, ...], nnz: int, stored: np.dtype, dtype: np.dtype,
              index: np.dtype):
    values, indices, _ = csr_sections(nnz, shape[0], stored.itemsize, index.itemsize)
    data = blob[:nnz * stored.itemsize].view(stored)
    column_indices = blob[values:values + nnz * index.itemsize].view(index)
    start = values + indices
    indptr = blob[start:start + (shape[0] + 1) * index.itemsize].view(index)
    if stored != np.dtype(dtype):
        data = data.astype(dtype)
    return make_csr(data, column_indices, indptr, (shape[0], shape[1]))
