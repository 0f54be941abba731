"""Column kinds and types of bound relations: keys (BIGINT), tensors (dtype, tile, extent), other."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import numpy as np


@dataclass(frozen=True)
class KeyType:
    """An integer key column (BIGINT); NULL only on the missing side of an outer join."""

    def __str__(self) -> str:
        return "BIGINT"


@dataclass(frozen=True)
class TensorType:
    """A tile-valued column: dtype, nominal tile shape, and logical extent per tile axis (None: unknown).

    Edge tiles may be smaller than `tile`; a 0-d tile (`tile == ()`) is a scalar per tuple.
    """

    dtype: np.dtype
    tile: tuple[int, ...]
    extent: tuple[Optional[int], ...]

    def __str__(self) -> str:
        return f"TENSOR({self.dtype.name}, {list(self.tile)})"


@dataclass(frozen=True)
class ScalarType:
    """A constant's type: a Python int, float, bool or str (weak in dtype promotion, like numpy's)."""

    python_type: type

    def __str__(self) -> str:
        return self.python_type.__name__.upper()


@dataclass(frozen=True)
class OtherType:
    """A non-numeric column of an ordinary table: usable by plain SQL only."""

    name: str

    def __str__(self) -> str:
        return self.name


ColumnType = Union[KeyType, TensorType, ScalarType, OtherType]
KEY = KeyType()

_INTEGER_TYPES = {"BIGINT", "INTEGER", "SMALLINT", "TINYINT", "UBIGINT", "UINTEGER", "USMALLINT",
                  "UTINYINT", "HUGEINT", "INT64", "INT32", "INT"}
_FLOAT_TYPES = {"DOUBLE": "float64", "FLOAT": "float32", "REAL": "float32", "BOOLEAN": "bool"}


def type_of_sql_column(sql_type: str) -> ColumnType:
    """How a column of an ordinary table appears to tensor queries."""
    upper = sql_type.upper()
    if upper in _INTEGER_TYPES:
        return KEY
    if upper in _FLOAT_TYPES:
        return TensorType(np.dtype(_FLOAT_TYPES[upper]), (), ())
    if upper.startswith("DECIMAL"):
        return TensorType(np.dtype("float64"), (), ())
    return OtherType(upper)


@dataclass(frozen=True)
class Column:
    """A column of a bound relation; `qualifier` is the alias it is visible under (None when hidden)."""

    name: str
    type: ColumnType
    qualifier: Optional[str] = None

    @property
    def is_key(self) -> bool:
        return isinstance(self.type, KeyType)

    @property
    def is_tensor(self) -> bool:
        return isinstance(self.type, TensorType)


Schema = tuple[Column, ...]
