"""A tensor's tiles in parts: the tile table the catalog names, then `<table>_p1`, `_p2`, ... beside it.

DuckDB 2 holds a whole row group in memory while it commits or checkpoints it, and a tile table
has few rows, so it is one row group: a table larger than DuckDB's memory_limit cannot be
committed. A writer therefore fills a part up to `part_bytes` (half of DuckDB's memory) and then
starts the next; at the default memory_limit parts are gigabytes and a tensor has one table. Parts
are found by name in DuckDB's own catalog (transactional: a rolled-back write's parts are gone).
"""
from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, field
from typing import Callable, Optional

from trdb.storage.catalog_format import SMALL_TILE_TABLE
from trdb.storage.database import Database
from trdb.storage.memory import duckdb_bytes

PART_SHARE = 2                       # a part holds at most this fraction of DuckDB's memory
PART_BYTES: Optional[int] = None     # a fixed part size instead (tests make it tiny to get many parts)


def part_bytes(db: Database) -> int:
    """The bytes one part of a tile table holds at most (one tile more when a tile is larger)."""
    return PART_BYTES if PART_BYTES is not None else duckdb_bytes(db.file.memory.limit) // PART_SHARE


def part_name(table: str, number: int) -> str:
    return table if number == 0 else f"{table}_p{number}"


def part_number(table: str, name: str) -> Optional[int]:
    """Which part of `table` (schema-less names both) the table `name` is; None when it is none."""
    found = re.fullmatch(re.escape(table) + r"_p([1-9][0-9]{0,8})", name)
    return int(found.group(1)) if found else None


def parts(db: Database, table: str) -> list[str]:
    """The tables that hold a tensor's tiles (`table` is the catalog's `schema.name`), in part order.

    Looked up once per table in a transaction (a MINIMIZE step reads and writes a tensor's parts
    about four times): its snapshot shows no other connection's changes, and trdb's own (a part
    made or dropped) forget the names (`forget`). A transaction that begins right after this
    connection committed, with no other commit between, starts from the names the committed one
    knew (a MINIMIZE's next step: about 1.5 ms a tensor less). Outside a transaction every
    statement sees the latest commit, so the names are looked up each time."""
    if SMALL_TILE_TABLE.fullmatch(table):  # a row of the shared table (small_tiles): one part, never more
        return [table]
    known = _names_known(db)
    if known is None:
        return list(stored_rows(db, table))
    if table not in known:
        known[table] = list(stored_rows(db, table))
    return list(known[table])


def _names_known(db: Database) -> Optional[dict[str, list[str]]]:
    """The part names looked up in the connection's current transaction (None: it holds none open)."""
    if not db.in_transaction:
        return None
    epoch, known = _NAMES.get(db, (None, {}))
    if epoch != db.transaction_epoch:
        known = dict(known) if epoch is not None and _still_true(db, epoch) else {}
        _NAMES[db] = (db.transaction_epoch, known)
    return known


def _still_true(db: Database, epoch: int) -> bool:
    """Whether what transaction `epoch` saw of the parts holds in the current one: it committed, the
    current one began next, and no other commit (of another connection, or plain SQL) came between."""
    return db.last_commit == (epoch + 1, db.file.generation) and db.transaction_epoch == epoch + 2


def stored_rows(db: Database, table: str) -> dict[str, int]:
    """Each part's rows as DuckDB stores them, deleted ones included (they stay until the table is rewritten)."""
    schema, name = table.split(".", 1)
    rows = db.execute("SELECT table_name, estimated_size FROM duckdb_tables() WHERE database_name = "
                      "current_database() AND schema_name = ? AND (table_name = ? OR starts_with(table_name, ?))",
                      [schema, name, name + "_p"])
    found = {0 if t == name else part_number(name, t): int(n or 0) for t, n in rows}
    numbers = sorted(n for n in found if n is not None and n > 0)
    return {part_name(table, n): found[n] for n in [0] + numbers if n in found} or {table: 0}


@dataclass
class Appender:
    """Where a transaction's writes to one tensor go: its parts, the bytes each holds now, and which take
    more. A part takes appends when it holds no deleted rows (DuckDB would rewrite them with the new ones,
    all in memory) or was created by this transaction; a new part is made when none has room."""

    transaction: object
    tables: list[str]
    sizes: list[int]
    open: list[bool]
    created: set = field(default_factory=set)
    stale: bool = False

    def target(self, nbytes: int, limit: int) -> Optional[int]:
        """The first open part with room for `nbytes` more (an empty one takes any size); None: a new part."""
        for position, (held, open_) in enumerate(zip(self.sizes, self.open)):
            if open_ and (held == 0 or held + nbytes <= limit):
                return position
        return None


# per connection, per tile table: the appender of its current transaction (stale once the transaction ends)
_APPENDERS: "weakref.WeakKeyDictionary[Database, dict[str, Appender]]" = weakref.WeakKeyDictionary()
# per connection: (its transaction epoch, the part names of each tile table looked up in that transaction)
_NAMES: "weakref.WeakKeyDictionary[Database, tuple[int, dict[str, list[str]]]]" = weakref.WeakKeyDictionary()

Measure = Callable[[list[str]], tuple[list[int], list[int]]]  # tables -> (live bytes, live rows) per part


def appender(db: Database, table: str, measure: Measure) -> Appender:
    """The appender of this transaction for `table`; `measure(tables)` gives each part's bytes and rows."""
    transaction = _transaction(db)
    known = _APPENDERS.setdefault(db, {})
    found = known.get(table)
    if found is None or found.transaction != transaction or found.stale:
        created = found.created if found is not None and found.transaction == transaction else set()
        stored = stored_rows(db, table)
        tables = list(stored)
        if (names := _names_known(db)) is not None:
            names[table] = list(tables)
        sizes, rows = measure(tables)
        open_ = [t in created or stored[t] == r for t, r in zip(tables, rows)]
        found = known[table] = Appender(transaction, tables, sizes, open_, created)
    return found


def _transaction(db: Database) -> object:
    """Which transaction the connection is in: known without asking DuckDB while trdb holds one open."""
    if db.in_transaction:
        return "epoch", db.transaction_epoch
    return db.execute("SELECT txid_current()")[0][0]


def forget(db: Database, table: str) -> None:
    """The parts of `table` (a tile table or one of its parts) changed other than by appending (deletes,
    drops, a part made): look them up and measure them again."""
    names = _NAMES.get(db, (None, {}))[1]
    names.pop(table, None)
    names.pop(re.sub(r"_p[1-9][0-9]*$", "", table), None)
    found = _APPENDERS.get(db, {}).get(table)
    if found is not None:
        found.stale = True


def rewritten(db: Database, table: str) -> None:
    """A tile of `table` was overwritten in place: its parts are the same, their sizes may not be."""
    found = _APPENDERS.get(db, {}).get(table)
    if found is not None:
        found.stale = True


def created(db: Database, table: str, part: str) -> None:
    """This transaction created `part` of `table` (afresh): it takes appends, whatever DuckDB counts."""
    found = _APPENDERS.get(db, {}).get(table)
    transaction = _transaction(db)
    if found is None or found.transaction != transaction:
        found = _APPENDERS.setdefault(db, {})[table] = Appender(transaction, [], [], [], set(), stale=True)
    found.created.add(part)
    found.stale = True


def emptied(db: Database, table: str) -> None:
    """Every part of `table` was dropped and its first made anew in this transaction (it is the only one,
    and empty): the appender and the part names say so without asking DuckDB."""
    transaction = _transaction(db)
    _APPENDERS.setdefault(db, {})[table] = Appender(transaction, [table], [0], [True], {table})
    if (names := _names_known(db)) is not None:
        names[table] = [table]


def new_part(db: Database, found: Appender, create: Callable[[str], None]) -> int:
    """Create the next part (by `create(name)`) and return its position in the appender."""
    numbers = [0] + [part_number(found.tables[0], t) or 0 for t in found.tables[1:]]
    name = part_name(found.tables[0], max(numbers) + 1)
    create(name)
    found.tables.append(name)
    found.sizes.append(0)
    found.open.append(True)
    found.created.add(name)
    return len(found.tables) - 1
