"""Tiles as raw little-endian bytes in Arrow binary columns, decoded without per-row Python objects."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa


def little_endian(dtype: np.dtype) -> np.dtype:
    return np.dtype(dtype).newbyteorder("<") if np.dtype(dtype).itemsize > 1 else np.dtype(dtype)


def encode_tiles(tiles: Sequence[np.ndarray], dtype: np.dtype) -> pa.Array:
    """One large_binary Arrow array holding each tile's bytes (C order, little-endian)."""
    stored = little_endian(dtype)
    sizes = np.fromiter((t.size * stored.itemsize for t in tiles), dtype=np.int64, count=len(tiles))
    offsets = np.zeros(len(tiles) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    data = np.empty(int(offsets[-1]), dtype=np.uint8)
    for tile, start, end in zip(tiles, offsets[:-1], offsets[1:]):
        data[start:end].view(stored)[:] = np.asarray(tile).ravel()
    return pa.Array.from_buffers(pa.large_binary(), len(tiles), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def decode_tiles(column: pa.ChunkedArray, dtype: np.dtype, shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    """Read-only numpy views over an Arrow binary column, one per row, reshaped to `shapes`."""
    stored = little_endian(dtype)
    tiles: list[np.ndarray] = []
    for chunk in column.chunks:
        _, offset_buffer, data_buffer = chunk.buffers()
        offset_type = np.int64 if pa.types.is_large_binary(chunk.type) else np.int32
        offsets = np.frombuffer(offset_buffer, dtype=offset_type)[chunk.offset: chunk.offset + len(chunk) + 1]
        data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
        for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
            shape = shapes[len(tiles)]
            tile = data[start:end].view(stored).reshape(shape)
            tiles.append(tile if stored == np.dtype(dtype) else tile.astype(dtype))
    return tiles
