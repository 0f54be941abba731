"""Spill files: tuples written to temp_directory as raw bytes (never pickle) when an operator's memory is refused.

A spill file holds rows of keys (ints or NULL), scalars and tiles (dense arrays or CSR tiles, as
their raw little-endian bytes with dtype and shape). It is written once, then read back in
batches. Files live in one directory per process under the database's `temp_directory`
(`trdb-<pid>-<token>`), are removed when the operator that wrote them closes, and a later open of
the database removes the directories of processes that are gone (a crash leaves none behind for long).
"""
from __future__ import annotations

import errno
import io
import os
import secrets
import shutil
import struct
import tempfile
import threading
from typing import Callable, Iterable, Iterator, Optional

import numpy as np

from trdb.errors import DataError, OperationalError
from trdb.kernels.backend import to_host
from trdb.kernels.sparse import is_sparse, make_csr, nbytes, to_csr

_NONE, _INT, _FLOAT, _ARRAY, _CSR, _BOOL, _TEXT, _BIG_INT, _SCALAR = range(9)
_HEADER = struct.Struct("<I")         # values in a row
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_PREFIX = "trdb-"
READ_BATCH_BYTES = 8 << 20            # a read batch ends after about this many tile bytes


def default_directory(database_path: Optional[str]) -> str:
    """Beside the database file (`<file>.tmp`, as DuckDB does), else the system's temp directory."""
    if database_path:
        return os.path.abspath(database_path) + ".tmp"
    return os.path.join(tempfile.gettempdir(), "trdb.tmp")


class SpillDirectory:
    """This process's spill directory under one temp_directory; created on first use."""

    def __init__(self, root: str):
        self.root = root
        self._instance = secrets.token_hex(4)  # this database's: DuckDB's folder is one per database, not per process
        self._own: Optional[str] = None
        self._lock = threading.Lock()
        self.files_written = 0

    def remove_leftovers(self) -> None:
        """Remove spill directories whose process has ended (a crash)."""
        try:
            names = os.listdir(self.root)
        except OSError:
            return
        for name in names:
            pid = _pid_of(name)
            if pid is not None and not process_alive(pid):
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)

    @property
    def duckdb_folder(self) -> str:
        """DuckDB's own temp folder: one per database (DuckDB instance) of this process, and named so that
        `remove_leftovers` removes it after a crash. One per process was removed by whichever database of the
        process closed first, with the blocks another in-memory database had spilled there: its data."""
        return os.path.join(self.root, f"{_PREFIX}{os.getpid()}-duckdb-{self._instance}")

    def new_file(self, purpose: str) -> "SpillFile":
        return SpillFile(os.path.join(self._directory(), f"{purpose}-{secrets.token_hex(6)}.spill"))

    def _directory(self) -> str:
        with self._lock:
            if self._own is None or not os.path.isdir(self._own):
                own = os.path.join(self.root, f"{_PREFIX}{os.getpid()}-{secrets.token_hex(4)}")
                try:
                    make_folder(own)
                except OSError as exc:
                    raise _spill_error(exc, self.root) from None
                self._own = own
            self.files_written += 1
            return self._own

    def close(self, duckdb_closed: bool = True) -> None:
        """Remove this process's directory (its files are gone already unless a statement failed badly),
        then, once DuckDB has closed (`duckdb_closed`), DuckDB's folder, and the root when nothing else is in it.
        While DuckDB is open its folder stays: it holds blocks of live data (an in-memory database's)."""
        with self._lock:
            if self._own is not None:
                shutil.rmtree(self._own, ignore_errors=True)
                self._own = None
        if duckdb_closed:
            shutil.rmtree(self.duckdb_folder, ignore_errors=True)  # DuckDB has closed: what is left is garbage
        _remove_if_empty(self.root)


def make_folder(path: str, attempts: int = 5) -> None:
    """os.makedirs, again when another process removed an empty parent (its last connection closed) between
    making it and making `path`."""
    for attempt in range(attempts):
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            return
        except FileNotFoundError:
            if attempt == attempts - 1:
                raise


def _pid_of(name: str) -> Optional[int]:
    if not name.startswith(_PREFIX):
        return None
    try:
        return int(name[len(_PREFIX):].split("-", 1)[0])
    except ValueError:
        return None


def process_alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine (this one always does)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_if_empty(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


def _spill_error(exc: OSError, where: str) -> OperationalError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return OperationalError(f"the disk of temp_directory ({where}) is full: the statement needed to spill "
                                "more than it holds, and was rolled back",
                                hint="free space there, SET temp_directory to a larger disk, or raise memory_limit")
    return OperationalError(f"cannot spill to temp_directory ({where}): {exc.strerror or exc}",
                            hint="SET temp_directory to a writable directory")


class SpillFile:
    """Rows appended (write phase), then read back in batches, any number of times; `remove()` deletes it."""

    def __init__(self, path: str):
        self.path = path
        self.rows = 0
        self.bytes = 0
        self._out: Optional[io.BufferedWriter] = None

    def write(self, rows: Iterable[tuple]) -> int:
        """Append rows; returns the bytes written. A full disk is an OperationalError."""
        try:
            if self._out is None:
                self._out = open(self.path, "ab", buffering=1 << 18)
            written = 0
            for row in rows:
                written += _write_row(self._out, row)
                self.rows += 1
            self.bytes += written
            return written
        except OSError as exc:
            raise _spill_error(exc, os.path.dirname(self.path)) from None

    def finish(self) -> None:
        """End the write phase (flushes)."""
        if self._out is not None:
            try:
                self._out.close()
            except OSError as exc:
                raise _spill_error(exc, os.path.dirname(self.path)) from None
            self._out = None

    def batches(self, batch_bytes: int = READ_BATCH_BYTES) -> Iterator[list]:
        """The rows in the order written, in batches of about `batch_bytes` of tiles."""
        self.finish()
        if not self.rows:
            return
        with open(self.path, "rb", buffering=1 << 18) as source:
            batch, size = [], 0
            for _ in range(self.rows):
                row, row_bytes = _read_row(source, self.path)
                batch.append(row)
                size += row_bytes
                if size >= batch_bytes:
                    yield batch
                    batch, size = [], 0
            if batch:
                yield batch

    def __iter__(self) -> Iterator[tuple]:
        for batch in self.batches():
            yield from batch

    def remove(self) -> None:
        if self._out is not None:
            try:
                self._out.close()
            except OSError:
                pass
            self._out = None
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass


def _write_row(out, row: tuple) -> int:
    out.write(_HEADER.pack(len(row)))
    written = _HEADER.size
    for value in row:
        written += _write_value(out, value)
    return written


def _write_value(out, value) -> int:
    if value is None:
        out.write(bytes((_NONE,)))
        return 1
    if isinstance(value, np.generic):  # before int and float: np.float64 is a float
        return _write_array(out, np.asarray(value), _SCALAR)
    if isinstance(value, bool):
        out.write(bytes((_BOOL, int(value))))
        return 2
    if isinstance(value, int):
        if -(1 << 63) <= value < (1 << 63):
            out.write(bytes((_INT,)) + _I64.pack(value))
            return 9
        return _write_blob(out, _BIG_INT, str(value).encode())
    if isinstance(value, float):
        out.write(bytes((_FLOAT,)) + _F64.pack(value))
        return 9
    if isinstance(value, str):
        return _write_blob(out, _TEXT, value.encode())
    value = to_host(value, keep_sparse=True)
    if is_sparse(value):
        return _write_csr(out, to_csr(value))
    return _write_array(out, np.asarray(value))


def _write_blob(out, tag: int, data: bytes) -> int:
    out.write(bytes((tag,)) + _I64.pack(len(data)) + data)
    return 9 + len(data)


def _dtype_bytes(dtype: np.dtype) -> bytes:
    text = np.dtype(dtype).newbyteorder("<").str.encode() if np.dtype(dtype).itemsize > 1 else np.dtype(dtype).str.encode()
    if np.dtype(dtype).hasobject:
        raise DataError("an object array cannot be spilled")
    return bytes((len(text),)) + text


def _write_array(out, array: np.ndarray, tag: int = _ARRAY) -> int:
    dtype = _dtype_bytes(array.dtype)
    stored = np.ascontiguousarray(array, dtype=np.dtype(array.dtype).newbyteorder("<")
                                  if array.dtype.itemsize > 1 else array.dtype)
    head = bytes((tag,)) + dtype + bytes((array.ndim,)) + b"".join(_I64.pack(n) for n in array.shape)
    out.write(head)
    out.write(memoryview(stored.reshape(-1)).cast("B"))
    return len(head) + stored.nbytes


def _write_csr(out, tile) -> int:
    dtype = _dtype_bytes(tile.data.dtype)
    data = np.ascontiguousarray(tile.data, dtype=np.dtype(tile.data.dtype).newbyteorder("<")
                                if tile.data.dtype.itemsize > 1 else tile.data.dtype)
    indices = np.ascontiguousarray(tile.indices, dtype="<i8")
    indptr = np.ascontiguousarray(tile.indptr, dtype="<i8")
    head = bytes((_CSR,)) + dtype + _I64.pack(tile.shape[0]) + _I64.pack(tile.shape[1]) + _I64.pack(len(data))
    out.write(head)
    for part in (data, indices, indptr):
        out.write(memoryview(part).cast("B"))
    return len(head) + data.nbytes + indices.nbytes + indptr.nbytes


def _read_exact(source, count: int, path: str) -> bytes:
    data = source.read(count)
    if len(data) != count:
        raise OperationalError(f"spill file {path} ended early (it was changed or truncated while in use)")
    return data


def _read_row(source, path: str) -> tuple[tuple, int]:
    (count,) = _HEADER.unpack(_read_exact(source, _HEADER.size, path))
    values, size = [], 0
    for _ in range(count):
        value = _read_value(source, path)
        size += nbytes(value) if hasattr(value, "shape") else 8
        values.append(value)
    return tuple(values), size


def _read_value(source, path: str):
    tag = _read_exact(source, 1, path)[0]
    read: Callable[[int], bytes] = lambda n: _read_exact(source, n, path)
    if tag == _NONE:
        return None
    if tag == _BOOL:
        return bool(read(1)[0])
    if tag == _INT:
        return _I64.unpack(read(8))[0]
    if tag == _FLOAT:
        return _F64.unpack(read(8))[0]
    if tag in (_TEXT, _BIG_INT):
        text = read(_I64.unpack(read(8))[0]).decode()
        return int(text) if tag == _BIG_INT else text
    dtype = np.dtype(read(read(1)[0]).decode())
    if tag in (_ARRAY, _SCALAR):
        ndim = read(1)[0]
        shape = tuple(_I64.unpack(read(8))[0] for _ in range(ndim))
        count = int(np.prod(shape, dtype=np.int64))
        array = np.frombuffer(bytearray(read(count * dtype.itemsize)), dtype=dtype).reshape(shape)
        array = array if dtype.isnative else array.astype(dtype.newbyteorder("="))
        return array[()] if tag == _SCALAR else array
    if tag == _CSR:
        rows, columns, nnz = (_I64.unpack(read(8))[0] for _ in range(3))
        data = np.frombuffer(bytearray(read(nnz * dtype.itemsize)), dtype=dtype)
        indices = np.frombuffer(bytearray(read(nnz * 8)), dtype="<i8")
        indptr = np.frombuffer(bytearray(read((rows + 1) * 8)), dtype="<i8")
        return make_csr(data.astype(dtype.newbyteorder("="), copy=False), indices, indptr, (rows, columns))
    raise OperationalError(f"spill file {path} holds an unknown value tag {tag} (it was changed while in use)")
