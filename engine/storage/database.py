"""One connection's DuckDB connection: every query fully fetched, DuckDB errors mapped to trdb's, transactions."""
from __future__ import annotations

import os
import shutil
import threading
from contextlib import contextmanager, suppress
from typing import Any, Iterator, Optional, Sequence

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from trdb import errors
from trdb.storage.database_file import COMMIT_GARBAGE_BYTES, DatabaseFile
from trdb.storage.duckdb_errors import is_fatal, translate
from trdb.storage.memory import duckdb_bytes

DUCKDB_TEMP_SHARE = 0.9  # of the free disk under temp_directory: what DuckDB spills to at most (its default)
_LOST = "this connection's transaction was lost"
RETURNING_ROWS = 256  # an append of at most this many rows is an INSERT ... RETURNING (append_arrow)


def _free_bytes(path: str) -> Optional[int]:
    """Bytes free on the disk that holds `path` (or its nearest existing folder); None if it cannot be told."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def _largest_value(data: pa.Table) -> int:
    """The bytes of the largest blob (a tile) in `data`'s binary columns."""
    sizes = [pc.max(pc.binary_length(column)).as_py() or 0 for column in data.columns
             if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)]
    return max(sizes, default=0)


class Database:
    """One connection to an embedded DuckDB database (a file, or memory when path is None).

    Connections to one file in one process share its `DatabaseFile`; each has its own transaction."""

    def __init__(self, path: Optional[str] = None, read_only: bool = False, memory_limit: int = 1 << 30):
        self.path = path
        self.file = DatabaseFile.open(path, read_only, memory_limit)
        try:
            self._duckdb, self._incarnation = self.file.connection(), self.file.incarnation
        except BaseException:
            self.file.release()
            raise
        self._lock = threading.RLock()
        self._inserting_tiles = False  # an Arrow insert of tiles runs in DuckDB now (a cancel may interrupt it)
        self.explicit_transaction = False
        self._statement_transaction = False
        self.transaction_epoch = 0  # advanced as every transaction begins and ends (what it saw may be gone)
        self.last_commit: tuple[int, int] = (-1, -1)  # (epoch, file generation) right after this connection's last commit
        if not read_only:
            try:
                self._store_tiles_uncompressed()
            except BaseException:
                self.close()
                raise

    def _store_tiles_uncompressed(self) -> None:
        """Tile tables are written uncompressed: ZSTD made point look-ups of tiles ~400x slower."""
        self.execute("SET force_compression = 'uncompressed'")

    @property
    def _con(self) -> duckdb.DuckDBPyConnection:
        """This connection's DuckDB connection, made again after the database was reopened (see `_recover`)."""
        if self._incarnation != self.file.incarnation:
            self._renew()
            if self.explicit_transaction:  # it was DuckDB's transaction on the instance that is gone
                raise errors.OperationalError(f"the database was reopened after a fatal error: {_LOST}",
                                              hint="ROLLBACK, and run the transaction again")
        return self._duckdb

    def _renew(self) -> None:
        with suppress(duckdb.Error):
            self._duckdb.close()
        self._duckdb, self._incarnation = self.file.connection(), self.file.incarnation
        if not self.read_only:
            self._duckdb.execute("SET force_compression = 'uncompressed'")

    def _recover(self, error: errors.Error) -> errors.Error:
        """DuckDB invalidated the database (a fatal I/O error: a full disk, a temp file gone): open it again,
        its write-ahead log replaying what was committed, so that the next statement runs; `error` says why."""
        try:
            self.file.reopen(self._incarnation)
            self._renew()
        except errors.Error as exc:
            return type(error)(f"{error.message}; reopening the database failed too: {exc.message}", hint=error.hint)
        except duckdb.Error as exc:
            return type(error)(f"{error.message}; reopening the database failed too: {exc}", hint=error.hint)
        return type(error)(f"{error.message}\nDuckDB stopped the database at this fatal error, and trdb has opened "
                           "it again: what was committed is intact, and this statement did not complete", hint=error.hint)

    @property
    def read_only(self) -> bool:
        return self.file.read_only

    def room(self) -> Optional[tuple[int, Optional[int]]]:
        """What a new tensor can take: (bytes of disk, bytes of memory). For a file, what is free on its disk
        (memory: None, the file holds everything); for a database in memory, what DuckDB may spill to
        temp_directory (90% of what is free there, DuckDB's own default cap) and DuckDB's part of
        memory_limit. None when the disk cannot be told."""
        if self.path is not None:
            free = _free_bytes(os.path.dirname(os.path.abspath(self.path)))
            return None if free is None else (free, None)
        free = _free_bytes(self.file.spill.root)
        return None if free is None else (int(free * DUCKDB_TEMP_SHARE), duckdb_bytes(self.file.memory.limit))

    # ------------------------------------------------------------ queries

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Run SQL and return all rows (results are never left open: DuckDB 2 streams them)."""
        with self._lock, self._translated():
            return self._con.execute(sql, list(params)).fetchall()

    def execute_with_description(self, sql: str, params: Sequence[Any] = ()) -> tuple[list[tuple], Any, int]:
        with self._lock, self._translated():
            result = self._con.execute(sql, params if isinstance(params, dict) else list(params))
            if result is None:  # DuckDB found no statement in the text
                raise errors.ProgrammingError("empty statement")
            description = result.description
            rows = result.fetchall()
            return rows, description, self._con.rowcount

    def arrow(self, sql: str, params: Sequence[Any] = ()) -> pa.Table:
        with self._lock, self._translated():
            if params:
                return self._con.execute(sql, list(params)).to_arrow_table()
            return self._con.sql(sql).to_arrow_table()

    def arrow_batches(self, sql: str, rows: int) -> Iterator[pa.RecordBatch]:
        """A query's result streamed as Arrow record batches of `rows` rows; this connection is held until
        the last one is read (or the iterator is closed).

        The lock is this connection's alone: other connections (each its own DuckDB connection) run their
        statements meanwhile (tests/storage/test_arrow_batches.py). It is held across yields because the
        stream lives on this DuckDB connection, where any other query would close it; a DuckDB cursor of
        its own cannot take over, being another connection: it would not see the statement's uncommitted
        work or its temp tables (FROM COO streams its staged entries from one)."""
        with self._lock, self._translated():
            reader = self._con.sql(sql).to_arrow_reader(rows)
            yield from reader

    def register_and_run(self, name: str, data: pa.Table, sql: str) -> list[tuple]:
        """Run SQL that reads the Arrow table `data` under the view name `name` (small tables: the view and
        its data live until COMMIT, see `append_arrow`)."""
        with self._lock, self._translated():
            self._con.register(name, data)
            try:
                return self._con.execute(sql).fetchall()
            finally:
                try:
                    self._con.unregister(name)
                except duckdb.Error as exc:  # fails in a transaction the query just aborted: that error counts
                    if isinstance(exc, duckdb.InterruptException) or "KeyboardInterrupt" in str(exc):
                        raise KeyboardInterrupt from None  # a Ctrl-C that DuckDB took here: not swallowed

    def run_over_arrow(self, data: pa.Table, sql: str) -> list[tuple]:
        """Run SQL that reads the Arrow table `data` where it says `{source}` (a subquery over it), through a
        relation as `append_arrow` inserts: no view is registered and dropped, which kept the data until COMMIT
        and cost a MINIMIZE step's overwrite of a dozen small tiles about 0.4 ms more (3.2 against 2.7 ms in
        DuckDB alone, with its COMMIT)."""
        with self._lock, self._translated():
            source = self._con.from_arrow(data)
            return self._con.execute(sql.format(source=f"({source.sql_query()})")).fetchall()

    def append_arrow(self, table: str, data: pa.Table) -> None:
        """Append an Arrow table's rows to `table` (a quoted name), its columns in the table's order.

        Through a relation, not a registered view: DuckDB keeps a dropped view (and the Arrow data it
        holds) until COMMIT, so a long write would hold every batch it inserted (measured: 584 MB against
        342 MB peak for 256 MB written with DuckDB at 64 MB, as fast). The relation's insert_into, by
        position, costs about 1.2 ms less a call than an INSERT ... BY NAME over it (a 4 MB tile: 5.0
        against 6.4 ms in a MINIMIZE step), at the same peak memory; the tile tables' column order is
        checked when the catalog is read (catalog_validation).

        A batch of a few rows is inserted with RETURNING, which keeps DuckDB (at threads > 1) from its
        batch insert, whose copy of every blob costs about twice the plain insert's (a 4 MB tile: 2.2
        against 2.9 ms in memory; 16 MB: 6.6 against 11 ms); a batch of many small tiles goes on without
        it, as the rows RETURNING hands back would cost more than it saves (4096 rows: even)."""
        self.file.note_tile(_largest_value(data))
        with self._lock, self._translated():
            source = self._con.from_arrow(data)
            self._inserting_tiles = True
            try:
                if data.num_rows <= RETURNING_ROWS:
                    self._con.execute(f"INSERT INTO {table} {source.sql_query()} RETURNING NULL").fetchall()
                else:
                    source.insert_into(table)
            finally:
                self._inserting_tiles = False

    def register(self, name: str, data: Any) -> None:
        """Make a pandas DataFrame or Arrow table (or reader) readable as a view of this connection."""
        with self._lock, self._translated():
            self._con.register(name, data)

    def unregister(self, name: str) -> None:
        with self._lock, self._translated():
            self._con.unregister(name)

    def interrupt(self) -> None:
        self._con.interrupt()

    def interrupt_tile_insert(self) -> None:
        """Stop the tile insert running now, if one is (a cancelled statement: a tile of 256 MB takes half a
        second to insert); it raises QueryCancelled there. DuckDB forgets an interrupt that comes between
        queries, so a statement's other work is never hit by one meant for an insert that just ended, unless
        its next query starts at that very moment: it fails then, as cancelled, which the caller asked for."""
        if self._inserting_tiles:
            self._con.interrupt()

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except duckdb.Error as exc:
            if "KeyboardInterrupt" in str(exc):  # Ctrl-C while DuckDB ran Python code (an Arrow scan)
                raise KeyboardInterrupt from None
            error = translate(exc, self.file.spill.root)
            if self.file.spill.root in str(exc):  # DuckDB makes only the last folder of its temp directory
                self.file.restore_temp_folder()
            raise (self._recover(error) if is_fatal(exc) else error) from None
        except RuntimeError as exc:
            if "interrupted" in str(exc).lower():  # DuckDB turns Ctrl-C during its query into this
                raise KeyboardInterrupt from None
            raise
        except UnicodeDecodeError:  # DuckDB's message quoted bytes that are not UTF-8 (X'é')
            raise errors.ProgrammingError("DuckDB rejected the statement (its error message was not valid "
                                          "UTF-8)", hint="look for non-ASCII characters in literals, such as "
                                          "X'...' blob literals, which take hex digits only") from None

    # ------------------------------------------------------------ transactions

    @property
    def in_transaction(self) -> bool:
        return self.explicit_transaction or self._statement_transaction

    def begin(self) -> None:
        if self.file.checkpoint_due():
            self._free_garbage()
        self.transaction_epoch += 1
        try:
            self.execute("BEGIN TRANSACTION")
        except errors.OperationalError as exc:
            if "within a transaction" not in str(exc):
                raise
            # a second Ctrl-C stopped the last statement's ROLLBACK: what it left open is rolled back now
            self.execute("ROLLBACK")
            self.execute("BEGIN TRANSACTION")

    def _free_garbage(self) -> None:
        """CHECKPOINT a database in memory, which frees the rows writes made obsolete (DatabaseFile.note_garbage);
        where DuckDB cannot now (another transaction is open), a later transaction's start tries again."""
        try:
            self.execute("CHECKPOINT")
        except errors.QueryCancelled:
            raise  # a Ctrl-C that DuckDB took here cancels the statement about to begin
        except errors.OperationalError:
            return
        self.file.garbage_bytes = 0

    def pin_snapshot(self) -> None:
        """DuckDB takes a transaction's snapshot at its first read of the database: read now."""
        try:
            self.execute("SELECT count(*) FROM _trdb.format")
        except errors.ProgrammingError:  # a read-only database without trdb's catalog: nothing to pin
            pass

    def commit(self) -> None:
        self.transaction_epoch += 1
        with self.file.committing():
            self.execute("COMMIT")
            self.file.note_garbage(COMMIT_GARBAGE_BYTES)
            generation = self.file.generation + 1  # where this commit leaves it: no other commit runs meanwhile
        self.last_commit = (self.transaction_epoch, generation)

    def rollback(self) -> None:
        self.transaction_epoch += 1
        try:
            self.execute("ROLLBACK")
        except errors.OperationalError as exc:  # an interrupt, or a reopened database, may have ended it already
            if "no transaction is active" not in str(exc).lower() and _LOST not in str(exc):
                raise

    @contextmanager
    def statement(self, writes: bool = True) -> Iterator[None]:
        """Make one statement atomic: its own transaction unless an explicit one is open. A transaction
        that only reads (`writes=False`) ends without a commit, so it advances no generation."""
        if self.in_transaction:
            yield
            return
        # the lock guards each call, not the statement: workers read tiles while it runs. An interrupt
        # (Ctrl-C) may land anywhere, also between BEGIN or COMMIT and the flag: whatever it leaves open
        # is rolled back, so that the next statement does not find DuckDB inside a transaction
        self._statement_transaction = True
        try:
            self.begin()
            yield
        except BaseException:
            self._statement_transaction = False
            self.rollback()
            raise
        try:
            self.commit() if writes else self.rollback()
        except BaseException:
            with suppress(errors.Error):  # none is left when COMMIT ran before the interrupt came
                self.rollback()
            raise
        finally:
            self._statement_transaction = False

    def close(self) -> None:
        with self._lock:
            try:
                self._duckdb.close()
            except duckdb.Error:
                pass
            finally:
                self.file.release()
