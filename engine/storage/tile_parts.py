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
    """The tables that hold a tensor's tiles (`table` is the catalog's `schema.name`), in part order."""
    schema, name = table.split(".", 1)
    rows = db.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
                      "AND schema_name = ? AND starts_with(table_name, ?)", [schema, name + "_p"])
    numbers = sorted(n for n in (part_number(name, row[0]) for row in rows) if n is not None)
    return [table] + [part_name(table, n) for n in numbers]


@dataclass
class Appender:
    """Where a transaction's writes to one tensor go: its parts and the bytes each holds now."""

    transaction: int
    tables: list[str]
    sizes: list[int]
    numbers: list[int] = field(default_factory=list)

    def target(self, nbytes: int, limit: int) -> Optional[int]:
        """The first part with room for `nbytes` more (an empty one takes any size); None: a new part."""
        for position, held in enumerate(self.sizes):
            if held == 0 or held + nbytes <= limit:
                return position
        return None


# per connection, per tile table: the appender of its current transaction (stale once the transaction ends)
_APPENDERS: "weakref.WeakKeyDictionary[Database, dict[str, Appender]]" = weakref.WeakKeyDictionary()


def appender(db: Database, table: str, sizes: Callable[[list[str]], list[int]]) -> Appender:
    """The appender of this transaction for `table`; `sizes(tables)` measures each part when first needed."""
    transaction = db.execute("SELECT txid_current()")[0][0]
    known = _APPENDERS.setdefault(db, {})
    found = known.get(table)
    if found is None or found.transaction != transaction:
        tables = parts(db, table)
        numbers = [0] + [part_number(table, t) or 0 for t in tables[1:]]
        found = known[table] = Appender(transaction, tables, sizes(tables), numbers)
    return found


def forget(db: Database, table: str) -> None:
    """The parts of `table` changed other than by appending (deletes, drops): measure them again."""
    known = _APPENDERS.get(db)
    if known is not None:
        known.pop(table, None)


def new_part(db: Database, found: Appender, create: Callable[[str], None]) -> int:
    """Create the next part (by `create(name)`) and return its position in the appender."""
    number = max(found.numbers) + 1
    name = part_name(found.tables[0], number)
    create(name)
    found.tables.append(name)
    found.sizes.append(0)
    found.numbers.append(number)
    return len(found.tables) - 1
