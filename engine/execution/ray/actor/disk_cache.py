"""Inside a Ray actor: kept partitions moved to a cache directory on the node's local disk.

A partition that no longer fits the actor's memory budget (`ray_resident_bytes`) goes to disk
while the disk budget (`ray_disk_cache_bytes`) allows, instead of being dropped; a later statement
reads it back from there rather than having the driver ship it again. The driver decides what
moves (`residency.py` mirrors memory and disk). Files hold Arrow IPC streams of the tiles encoded
as the database stores them (`tile_codec`: no pickle), and are removed when the tensor changes
(its other versions are dropped as a new one is kept) and when the actor ends; a directory left by
an actor that was killed is removed by the next actor on that node that moves a partition to disk.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from trdb.errors import OperationalError
from trdb.kernels.sparse import is_sparse
from trdb.storage.spill import process_alive
from trdb.storage.tile_codec import decode_tiles, encode_tiles

PREFIX = "trdb-ray-cache-"


class CacheFileLost(OperationalError):
    """A partition this actor moved to disk is no longer there (its file was removed from under it)."""

    def __init__(self, path: Path):
        super().__init__(f"{path} was removed (by a cleaner of the temp directory?)")
        self.path = path

    def __reduce__(self):
        return CacheFileLost, (self.path,)


class DiskCache:
    """One actor's cache directory: a file per partition, written and read whole."""

    def __init__(self, base: Optional[str] = None) -> None:
        self._base = base
        self._lock = threading.Lock()
        self._directory: Optional[Path] = None

    @property
    def directory(self) -> Path:
        with self._lock:
            if self._directory is None:
                base = Path(self._base or tempfile.gettempdir())
                remove_orphans(base)
                self._directory = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base))
                atexit.register(self.remove)
            return self._directory

    def write(self, name: str, rows: list) -> None:
        """Write a partition's rows (keys, then one tile) to the file `name`."""
        path = self.directory / name
        with pa.OSFile(str(path.with_suffix(".tmp")), "wb") as sink:
            table = _table(rows)
            with ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
        path.with_suffix(".tmp").replace(path)

    def read(self, name: str) -> list:
        """The rows written under `name` (the file is removed: the partition is in memory again)."""
        path = self.directory / name
        try:
            with pa.OSFile(str(path), "rb") as source:  # read into memory: the tiles outlive the file
                table = ipc.open_stream(source).read_all()
        except FileNotFoundError:
            raise CacheFileLost(path) from None
        path.unlink()
        return _rows(table)

    def delete(self, name: str) -> None:
        with self._lock:
            directory = self._directory
        if directory is not None:
            (directory / name).unlink(missing_ok=True)

    def remove(self) -> None:
        """Remove the directory and all it holds (the actor ends)."""
        with self._lock:
            directory, self._directory = self._directory, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def remove_orphans(base: Path) -> None:
    """Remove cache directories of actors on this node whose process is gone (killed: no exit hook ran)."""
    for directory in base.glob(PREFIX + "*"):
        pid = directory.name[len(PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(directory, ignore_errors=True)


def _table(rows: list) -> pa.Table:
    """Rows (integer keys, then a tile of one dtype) as columns: keys, shape, dtype, format, nnz, bytes."""
    width = len(rows[0]) - 1 if rows else 0
    tiles = [row[-1] for row in rows]
    dtype = np.dtype(tiles[0].dtype) if tiles else np.dtype("float64")
    blobs, formats = encode_tiles(tiles, dtype)
    columns = {f"k{d}": pa.array([row[d] for row in rows], pa.int64()) for d in range(width)}
    columns.update(shape=pa.array([list(t.shape) for t in tiles], pa.list_(pa.int64())),
                   fmt=pa.array(formats), nnz=pa.array([t.nnz if is_sparse(t) else t.size for t in tiles], pa.int64()),
                   v=blobs)
    return pa.table(columns, metadata={"dtype": dtype.str})


def _rows(table: pa.Table) -> list:
    dtype = np.dtype(table.schema.metadata[b"dtype"].decode())
    keys = [table.column(name).to_pylist() for name in table.column_names if name.startswith("k")]
    shapes = [tuple(s) for s in table.column("shape").to_pylist()]
    tiles = decode_tiles(table.column("v"), dtype, shapes, table.column("fmt").to_numpy(),
                         table.column("nnz").to_numpy(), name="(Ray cache)")
    return [tuple(key[n] for key in keys) + (tile,) for n, tile in enumerate(tiles)]
