"""Catalog rows are not trusted: each is checked field by field before it becomes a tensor's metadata."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from trdb.errors import DataError
from trdb.parser import ParseError, ast, parse
from trdb.storage.catalog_format import SMALL_TILE_TABLE, SMALL_TILES
from trdb.storage.tensor_meta import DTYPES, TensorMeta
from trdb.storage.tile_parts import part_number

INT64_MAX = 2**63 - 1
MAX_LOCATION = 4096
TILE_TABLE = re.compile(r"_trdb\.tiles_[0-9]{1,18}")


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
    name, keys, value_name, dtype, shape, tile = checked_layout(
        row.name, _json_list(row.keys, "keys"), row.value_name, row.dtype, _json_list(row.shape, "shape"),
        _json_list(row.tile, "tile"))
    location = _location(row.location, row.tile_table)
    table = "" if location is not None else _tile_table(row.tile_table, len(keys), tile_tables)
    counts = [row.tuple_count, row.nnz, row.csr_tuples or 0, row.csr_nnz or 0, row.data_version or 0]
    if not all(_is_int(c) and c >= 0 for c in counts):
        raise DataError(f"the statistics {counts[:4]} or the data version {counts[4]!r} are not counts")
    distinct = None if row.distinct_keys is None else \
        tuple(_checked_list(_json_list(row.distinct_keys, "distinct_keys"), "distinct_keys", _is_count))
    meta = TensorMeta(name, keys, value_name, dtype, shape, tile, table, *counts[:4],
                      distinct_keys=distinct, version=counts[4], location=location)
    if SMALL_TILE_TABLE.fullmatch(table) and meta.max_tuples != 1:  # its one row is read under key 0
        raise DataError(f"its tiles are rows of {SMALL_TILES}, which holds one tile a tensor, but its grid has more")
    return meta


def name_problem(name: Any, what: str = "name") -> Optional[str]:
    """Why `name` cannot name a tensor, a view, a key or a value column, or None: the one rule for every
    name, checked where a name enters the catalog (CREATE, ALTER, IMPORT) and again where it is loaded.
    Any non-empty text without a NUL character (PostgreSQL allows no NUL in any text)."""
    if not isinstance(name, str) or not name:
        return f"the {what} {name!r} is not a name"
    if "\x00" in name:
        return f"the {what} {name!r} holds a NUL character"
    if not _is_utf8(name):
        return f"the {what} {name!r} is not valid UTF-8 text (a lone surrogate)"
    return None


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_name(name: Any, what: str = "name") -> str:
    """`name`, or a DataError saying why it cannot be one (name_problem)."""
    problem = name_problem(name, what)
    if problem:
        raise DataError(problem)
    return name


def checked_layout(name: Any, keys: Any, value_name: Any, dtype: Any, shape: Any, tile: Any) -> tuple:
    """(name, keys, value name, numpy dtype, shape, tile) of a tensor, each checked by the loader's rules, or a
    DataError saying which is wrong: what a catalog row, an export's entry or a CREATE may hold."""
    check_name(name)
    keys = tuple(check_name(k, "key name") for k in _checked_list(keys, "keys", lambda k: True))
    if len({k.lower() for k in keys}) != len(keys):
        raise DataError(f"duplicate key names {keys}")
    check_name(value_name, "value column name")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise DataError(f"the dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    shape = tuple(_checked_list(shape, "shape", lambda n: _is_int(n) and 0 <= n <= INT64_MAX))
    tile = tuple(_checked_list(tile, "tile", lambda t: _is_int(t) and 0 < t <= INT64_MAX))
    if len(tile) != len(shape) or len(keys) > len(shape):
        raise DataError(f"shape {list(shape)}, tile {list(tile)} and keys {list(keys)} do not agree in rank")
    return name, keys, value_name, np.dtype(dtype), shape, tile


def meta_problem(meta: TensorMeta) -> Optional[str]:
    """Why the loader would refuse `meta` once stored (its names, dtype or layout), or None."""
    dtype = meta.dtype.name if meta.dtype == np.dtype(meta.dtype.name) else meta.dtype.str  # '>f8' is not float64
    try:
        checked_layout(meta.name, list(meta.keys), meta.value_name, dtype, list(meta.shape), list(meta.tile))
    except DataError as exc:
        return exc.message
    return None


def view_query(text: Any) -> ast.Query:
    """The query a view's stored text holds, or a DataError saying why it holds none (a crafted file or
    export may hold any text; CREATE VIEW stores only a query it has bound)."""
    if not isinstance(text, str):
        raise DataError(f"its text {_shown(text)} is not text")
    try:
        statement = parse(text)
    except ParseError as exc:
        raise DataError(f"its text does not parse ({exc.message})") from None
    if not isinstance(statement, ast.QueryStatement):
        raise DataError(f"its text is not a query: {_shown(text)}")
    return statement.query


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
    if isinstance(name, str) and SMALL_TILE_TABLE.fullmatch(name):
        columns = tile_tables.get(SMALL_TILES)
        wanted = {"owner": ("BIGINT", False), "nnz": ("BIGINT", False), "v": ("BLOB", False)}
        if columns is None or list(columns) != [*wanted, "fmt"] or any(columns[c] != w for c, w in wanted.items()):
            raise DataError(f"its tiles are rows of {SMALL_TILES}, which is missing or has other columns")
        return name
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


# A catalog list holds numbers or names, never a list or object: the text is refused before json parses it
# (json recurses once per level, so a crafted "[[[[..." would end in a RecursionError).
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')


def _json_list(text: Any, field: str) -> list:
    """The flat JSON list a catalog field holds, or a DataError."""
    value = None
    if isinstance(text, str):
        outside = _STRINGS.sub("", text)
        if outside.count("[") == 1 and "{" not in outside:
            try:
                value = json.loads(text)
            except (ValueError, RecursionError):
                value = None
    if not isinstance(value, list):
        raise DataError(f"the {field} {_shown(text)} is not a list of the right values")
    return value


def _checked_list(value: Any, field: str, valid) -> list:
    if not isinstance(value, (list, tuple)) or not all(valid(v) for v in value):
        raise DataError(f"the {field} {_shown(value)} is not a list of the right values")
    return list(value)


def _shown(value: Any) -> str:
    """A field's value in a message: its repr, cut short (a crafted one may be megabytes)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_count(value: Any) -> bool:
    return _is_int(value) and value >= 0


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
