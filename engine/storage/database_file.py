"""One database per file per process: the DuckDB instance, memory budget, buffer pool, spill directory and
commit counter every connection shares."""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager, suppress
from typing import Iterator, Optional

import duckdb

from trdb import errors
from trdb.kernels.backend import Backend
from trdb.storage.buffer_pool import BufferPool
from trdb.storage.memory import DUCKDB_THREADS, MemoryManager, duckdb_bytes
from trdb.storage.spill import SpillDirectory, default_directory, make_folder

_OPEN: dict[str, "DatabaseFile"] = {}
GPU_SHARE = 0.8  # of the device's memory, the default gpu_memory_limit (as DuckDB takes 80% of RAM)
_OPEN_LOCK = threading.Lock()  # a connection the collector frees closes after it (api/collected_close.py)
# DuckDB frees the old versions of rows that UPDATE and DELETE replaced at a checkpoint. A file checkpoints by
# itself as its write-ahead log grows; a database in memory has none and never does: a MINIMIZE step writing
# over 275 KB of tiles grew DuckDB's memory by that much a step (577 MB after 2,000 steps). trdb checkpoints
# one when this much is obsolete (about 0.5 ms a MB written since the last checkpoint; 0.4 ms when little is).
GARBAGE_CHECKPOINT_BYTES = 64 << 20
# what one commit that writes leaves obsolete besides tiles: the old versions of the catalog rows it updated
# (DuckDB's memory grew 0.4 KB a step for a 4 x 4 parameter trained by Adam)
COMMIT_GARBAGE_BYTES = 4 << 10


class DatabaseFile:
    """A DuckDB database instance (a file, or a private one in memory) and what its connections share.

    `generation` counts the commits (twice each: see `committing`): a connection whose catalog
    mirror was loaded at an older generation reloads it before its next statement. `write_lock`
    makes statements that write outside an explicit transaction run one after another, so that
    none computes from tiles another has just replaced (a lost update); commits take it too.
    """

    def __init__(self, path: Optional[str], read_only: bool, memory_limit: int):
        self.path, self.read_only = path, read_only
        try:
            self.root = duckdb.connect(path or ":memory:", read_only=read_only)
        except duckdb.Error as exc:
            raise errors.OperationalError(f"cannot open database {path!r}: {_reason(exc)}",
                                          hint=_open_hint(exc, read_only)) from None
        self.memory = MemoryManager(memory_limit)
        self.device_memory: Optional[MemoryManager] = None  # the GPU's budget, made when a statement runs there
        self.pool = BufferPool(self.memory)
        self.shared_settings: dict = {}  # the database-wide settings (config.settings.DATABASE_WIDE)
        self.spill = SpillDirectory(default_directory(path))
        self._retired_spills: list[SpillDirectory] = []  # earlier temp_directories: DuckDB's folders there live on
        self._duckdb_limits: tuple = (None, None, None)
        self.write_lock = threading.RLock()
        self.generation = 0
        self.incarnation = 0  # advanced as the DuckDB instance is opened again (reopen): connections renew theirs
        self._generation_changed = threading.Condition()
        self._connections = 0
        self.garbage_bytes = 0  # of rows writes made obsolete since the last checkpoint (in memory: see note_garbage)

    def note_garbage(self, nbytes: int) -> None:
        """Bytes of stored rows a write made obsolete (a tile written over, tiles deleted), which a database in
        memory keeps until a checkpoint (GARBAGE_CHECKPOINT_BYTES)."""
        if self.path is None:
            self.garbage_bytes += int(nbytes)

    def checkpoint_due(self) -> bool:
        return self.path is None and self.garbage_bytes >= GARBAGE_CHECKPOINT_BYTES

    @staticmethod
    def open(path: Optional[str], read_only: bool, memory_limit: int) -> "DatabaseFile":
        """The process's instance for `path` (a new private one for memory), with one more connection."""
        if path is None:
            instance = DatabaseFile(None, read_only, memory_limit)
            instance._connections = 1
            return instance
        key = os.path.realpath(path)
        with _OPEN_LOCK:
            instance = _OPEN.get(key)
            if instance is None:
                instance = _OPEN[key] = DatabaseFile(path, read_only, memory_limit)
            elif instance.read_only != read_only:
                mode = "read-only" if instance.read_only else "read-write"
                raise errors.OperationalError(
                    f"database {path!r} is already open {mode} in this process",
                    hint="open every connection to one file in the same mode, or close the others first")
            instance._connections += 1
            return instance

    def apply_settings(self) -> None:
        """Put the database-wide settings in force: the memory budget (and DuckDB's part of it, which
        also spills to temp_directory), the spill directory; leftovers of crashed processes are removed."""
        limit = self.shared_settings.get("memory_limit", self.memory.limit)
        directory = self.shared_settings.get("temp_directory") or default_directory(self.path)
        self.memory.resize(limit)
        self.pool.fit()
        if directory != self.spill.root:
            # DuckDB may keep spilling to its folder under the old directory until the database closes (it
            # refuses a new temp_directory once it has used one): that folder holds blocks of live data
            self.spill.close(duckdb_closed=False)
            self._retired_spills.append(self.spill)
            self.spill = SpillDirectory(directory)
        tile = self.memory.largest_tile
        limits = (duckdb_bytes(self.memory.limit, tile), DUCKDB_THREADS, self.spill.duckdb_folder)
        if limits == self._duckdb_limits:
            return
        old, self._duckdb_limits = self._duckdb_limits, limits
        self.spill.remove_leftovers()
        try:
            if old[:2] != limits[:2]:
                self.root.execute(f"SET memory_limit = '{limits[0]}B'")
                self.root.execute(f"SET threads = {limits[1]}")
            if old[2] != limits[2] and not self.read_only:
                make_folder(limits[2])  # DuckDB makes only the last folder
                self._point_duckdb_at(limits[2])
        except OSError as exc:
            raise errors.OperationalError(f"cannot use temp_directory {self.spill.root!r}: {exc.strerror}",
                                          hint="SET temp_directory to a writable directory") from None
        except duckdb.Error as exc:
            raise errors.OperationalError(f"cannot apply memory_limit or temp_directory: {_reason(exc)}") from None

    def memory_for(self, backend: Backend) -> MemoryManager:
        """The budget a statement's operators, queues and result reserve from: memory_limit while kernels
        run on the host; with device 'gpu' the tiles live in the GPU's memory, a budget of its own
        (gpu_memory_limit, by default 80% of the device's memory), counted and spilled the same way."""
        if backend.on_host:
            return self.memory
        limit = self.shared_settings.get("gpu_memory_limit") or int(backend.device_memory() * GPU_SHARE)
        with self.write_lock:
            if self.device_memory is None:
                self.device_memory = MemoryManager(limit, duckdb_share=False)
            self.device_memory.resize(limit)
            return self.device_memory

    def _point_duckdb_at(self, folder: str) -> None:
        try:
            self.root.execute("SET temp_directory = ?", [folder])
        except duckdb.Error as exc:
            if "after the current one has been used" not in str(exc):
                raise
            # DuckDB keeps the folder it has started spilling to until the database closes; trdb's own
            # spill files go to the new temp_directory at once

    def reopen(self, seen: int) -> None:
        """Open the database again after DuckDB invalidated it (a fatal I/O error), unless that was done since
        incarnation `seen`: the write-ahead log replays what was committed, the settings are put in force
        again, and every mirror, cached tile and DuckDB connection is renewed."""
        if self.path is None:
            raise errors.OperationalError("a database in memory cannot be opened again: its data is lost",
                                          hint="connect again")
        with self.write_lock:
            if self.incarnation != seen:
                return
            with suppress(duckdb.Error):
                self.root.close()
            try:
                self.root = duckdb.connect(self.path, read_only=self.read_only)
            except duckdb.Error as exc:
                raise errors.OperationalError(f"cannot open database {self.path!r}: {_reason(exc)}") from None
            self.incarnation += 1
            self._duckdb_limits = (None, None, None)
            self.pool.shrink(self.pool.bytes)  # tiles a failed commit kept may not be what was committed
            self.changed()
            try:
                self.apply_settings()
            except errors.OperationalError:  # temp_directory unusable still: DuckDB spills beside the file meanwhile
                self._duckdb_limits = (None, None, None)

    def note_tile(self, nbytes: int) -> None:
        """A tile of `nbytes` is about to be written: DuckDB's part of the budget grows to hold a few of them
        (its commit holds more than one at once), trdb's shrinks as much."""
        if nbytes > self.memory.largest_tile and self.memory.note_tile(nbytes):
            self.apply_settings()

    def restore_temp_folder(self) -> None:
        """Make DuckDB's temp folder again where it was removed (DuckDB makes only its last folder)."""
        with suppress(OSError, errors.Error):
            make_folder(self.spill.duckdb_folder)

    def connection(self) -> duckdb.DuckDBPyConnection:
        """A new DuckDB connection to this instance: its own transaction, shared data."""
        return self.root.cursor()

    @contextmanager
    def committing(self) -> Iterator[None]:
        """Around a commit: the generation is odd while it runs and advances by two (a seqlock), so a
        reader that saw an even generation before and after reading saw no commit land in between."""
        with self.write_lock:
            self._advance()
            try:
                yield
            finally:
                self._advance()

    def changed(self) -> None:
        """Something committed outside trdb's own commits (plain SQL): every mirror is out of date."""
        with self.committing():
            pass

    def _advance(self) -> None:
        with self._generation_changed:
            self.generation += 1
            self._generation_changed.notify_all()

    def stable_generation(self) -> int:
        """The generation when no commit is running (commits are short: wait for the one that is)."""
        with self._generation_changed:
            while self.generation % 2:
                self._generation_changed.wait()
            return self.generation

    def release(self) -> None:
        """One connection fewer; the last one closes the instance."""
        with _OPEN_LOCK:
            self._connections -= 1
            if self._connections > 0:
                return
            if self.path is not None and _OPEN.get(os.path.realpath(self.path)) is self:
                del _OPEN[os.path.realpath(self.path)]
        try:
            self.root.close()
        except duckdb.Error:
            pass
        for retired in self._retired_spills:
            retired.close()
        self.spill.close()


def _reason(exc: duckdb.Error) -> str:
    return str(exc).split("Error: ", 1)[-1].strip()


def _open_hint(exc: duckdb.Error, read_only: bool) -> Optional[str]:
    text = str(exc).lower()
    if "lock" in text:
        return ("another process has the file open for writing; close it first"
                + ("" if read_only else ", or open this one with read_only=True once no writer holds it"))
    return None
