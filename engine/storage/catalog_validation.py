"""Catalog rows are not trusted: each is checked field by field before it becomes a tensor's metadata."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from trdb.errors import DataError
from trdb.storage.tensor_meta import DTYPES, TensorMeta
from trdb.storage.tile_parts import part_number

INT64_MAX = 2**63 - 1
MAX_LOCATION = 4096
TILE_TABLE = re.compile(r"_trdb\.tiles_[0-9]{1,18}")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class CatalogRow:
    """One row of `_trdb.tensors`, as stored (any field may hold anything in a tampered file)."""

    name: Any
    keys: Any
    value_name: Any
    dtype: Any
    shape: Any
    tile: Any
    tile_table: Any
    tuple_count: Any
    nnz: Any
    csr_tuples: Any
    csr_nnz: Any
    distinct_keys: Any
    data_version: Any
    location: Any = None


@dataclass(frozen=True)
class DamagedTensor:
    """A catalog entry that failed its checks: the tensor cannot be read, and DROP TENSOR removes it."""

    name: str
    reason: str
    table: Optional[str]  # its tile table, when the name is a valid one (DROP removes it too)

    def error(self) -> DataError:
        return DataError(f'tensor "{self.name}" is damaged and cannot be read: {self.reason}',
                         hint=f'DROP TENSOR "{self.name}" removes it; the other tensors are not affected')


def tensor_from_row(row: CatalogRow, tile_tables: dict[str, dict[str, tuple[str, bool]]]) -> TensorMeta:
    """The metadata of a catalog row, or a DataError saying which field is wrong."""
    if not isinstance(row.name, str) or not row.name:
        raise DataError(f"the name {row.name!r} is not a name")
    keys = tuple(_json_list(row.keys, "keys", lambda k: isinstance(k, str) and _IDENTIFIER.fullmatch(k)))
    if len({k.lower() for k in keys}) != len(keys):
        raise DataError(f"duplicate key names {keys}")
    if not isinstance(row.value_name, str) or not _IDENTIFIER.fullmatch(row.value_name):
        raise DataError(f"the value column name {row.value_name!r} is not a name")
    if row.dtype not in DTYPES:
        raise DataError(f"the dtype {row.dtype!r} is not one of {', '.join(DTYPES)}")
    shape = tuple(_json_list(row.shape, "shape", lambda n: _is_int(n) and 0 <= n <= INT64_MAX))
    tile = tuple(_json_list(row.tile, "tile", lambda t: _is_int(t) and 0 < t <= INT64_MAX))
    if len(tile) != len(shape) or len(keys) > len(shape):
        raise DataError(f"shape {list(shape)}, tile {list(tile)} and keys {list(keys)} do not agree in rank")
    location = _location(row.location, row.tile_table)
    table = "" if location is not None else _tile_table(row.tile_table, len(keys), tile_tables)
    counts = [row.tuple_count, row.nnz, row.csr_tuples or 0, row.csr_nnz or 0, row.data_version or 0]
    if not all(_is_int(c) and c >= 0 for c in counts):
        raise DataError(f"the statistics {counts[:4]} or the data version {counts[4]!r} are not counts")
    distinct = None if row.distinct_keys is None else \
        tuple(_json_list(row.distinct_keys, "distinct_keys", lambda n: _is_int(n) and n >= 0))
    return TensorMeta(row.name, keys, row.value_name, np.dtype(row.dtype), shape, tile, table, *counts[:4],
                      distinct_keys=distinct, version=counts[4], location=location)


def _location(location: Any, tile_table: Any) -> Optional[str]:
    """An external tensor's location is only text here: it is checked against the allowed roots (settings of
    the connection, never of the file) each time it is read."""
    if location is None:
        return None
    if not isinstance(location, str) or not location or "\x00" in location or len(location) > MAX_LOCATION:
        raise DataError(f"the location {location!r} is not a path or URI")
    if tile_table is not None:
        raise DataError("it names both a location and a tile table")
    return location


def _tile_table(name: Any, key_count: int, tile_tables: dict[str, dict[str, tuple[str, bool]]]) -> str:
    """A tile table's name is spliced into SQL: only trdb's own pattern, naming a table of the right columns."""
    if not isinstance(name, str) or not TILE_TABLE.fullmatch(name):
        raise DataError(f"the tile table {name!r} is not a name trdb gives")
    if name not in tile_tables:
        raise DataError(f"its tile table {name} is missing")
    for table, columns in tile_tables.items():  # the table and its further parts (tile_parts)
        if table == name or part_number(name, table) is not None:
            _check_columns(table, columns, key_count)
    return name


def _check_columns(name: str, columns: dict[str, tuple[str, bool]], key_count: int) -> None:
    wanted = {f"k{d}": "BIGINT" for d in range(key_count)} | {"nnz": "BIGINT", "v": "BLOB"}
    for column, data_type in wanted.items():
        found = columns.get(column)
        if found is None or found[0] != data_type or found[1]:
            raise DataError(f"its tile table {name} has no NOT NULL {data_type} column {column}")
    if "fmt" not in columns:
        raise DataError(f"its tile table {name} has no fmt column")
    order = [*wanted, "fmt"]
    if list(columns) != order:  # tiles are appended by position (Database.append_arrow)
        raise DataError(f"its tile table {name} has the columns {', '.join(columns)}, not {', '.join(order)}")


def _json_list(text: Any, field: str, valid) -> list:
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(valid(v) for v in value):
        raise DataError(f"the {field} {text!r} is not a list of the right values")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
