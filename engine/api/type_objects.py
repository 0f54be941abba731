"""PEP 249 type objects (equal to the type codes in `description`) and type constructors."""
from __future__ import annotations

import datetime
import re
import time

_PARAMETERS = re.compile(r"[(\[<].*$", re.S)  # DECIMAL(4,2), TENSOR(float32, [2, 2]), INTEGER[]


def base_type(type_code: object) -> str:
    """A type code's base name: 'DECIMAL(4,2)' -> 'DECIMAL'; a list type ('INTEGER[]') stays a list."""
    text = str(type_code).strip().upper()
    if text.endswith("]") and not text.startswith("TENSOR"):
        return "LIST"
    return _PARAMETERS.sub("", text).strip()


class DBAPITypeObject:
    """A PEP 249 type object: equal to every type code (a `description` string) of its group."""

    def __init__(self, name: str, *types: str):
        self.name = name
        self.types = frozenset(types)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DBAPITypeObject):
            return self.types == other.types
        return other is not None and base_type(other) in self.types

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self.types)

    def __repr__(self) -> str:
        return f"<DBAPITypeObject {self.name} [{','.join(sorted(self.types))}]>"


# the groups DuckDB's own module uses, plus the aliases DuckDB's parser accepts in a cast
STRING = DBAPITypeObject("STRING", "VARCHAR", "CHAR", "BPCHAR", "TEXT", "STRING")
BINARY = DBAPITypeObject("BINARY", "BLOB", "BYTEA", "VARBINARY", "BIT", "BITSTRING")
NUMBER = DBAPITypeObject("NUMBER", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
                         "UINTEGER", "UBIGINT", "UHUGEINT", "BIGNUM", "VARINT", "DECIMAL", "NUMERIC", "FLOAT",
                         "REAL", "DOUBLE", "INT", "INT4", "INT8", "FLOAT4", "FLOAT8")
DATETIME = DBAPITypeObject("DATETIME", "DATE", "TIME", "TIME WITH TIME ZONE", "TIMETZ", "TIMESTAMP",
                           "TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ", "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS",
                           "DATETIME")
ROWID = DBAPITypeObject("ROWID", "ROWID")  # DuckDB has no row-id column type; nothing in a description is a ROWID
TENSOR = DBAPITypeObject("TENSOR", "TENSOR")  # trdb's own: the tile column of a tensor relation


Date = datetime.date
Time = datetime.time
Timestamp = datetime.datetime
Binary = bytes


def DateFromTicks(ticks: float) -> datetime.date:  # noqa: N802 (PEP 249 names it)
    """The local date of a POSIX time stamp, as PEP 249's reference implementation gives it."""
    return Date(*time.localtime(ticks)[:3])


def TimeFromTicks(ticks: float) -> datetime.time:  # noqa: N802
    """The local time of day of a POSIX time stamp."""
    return Time(*time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks: float) -> datetime.datetime:  # noqa: N802
    """The local date and time of a POSIX time stamp."""
    return Timestamp(*time.localtime(ticks)[:6])
