"""Metadata of a stored tensor relation: keys, dtype, logical shape, tiling and statistics."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional, Sequence

import numpy as np

from trdb.errors import ProgrammingError, did_you_mean
from trdb.kernels.axis_reductions import all_in_rows

DEFAULT_KEY_NAMES = ("i", "j", "k", "l", "m", "n")
MAX_SIZE = 2 ** 63  # a SHAPE or TILE size, like every key, must fit a BIGINT
DTYPES = ("float32", "float64", "int32", "int64", "bool", "float16")
# SQL spellings a user of DuckDB or PostgreSQL tries first, as DuckDB reads them (FLOAT is REAL,
# 4 bytes, in DuckDB; PostgreSQL's FLOAT is 8 bytes, but DuckDB is the SQL trdb passes through).
DTYPE_ALIASES = {"boolean": "bool", "real": "float32", "float": "float32", "float4": "float32",
                 "double": "float64", "float8": "float64", "int": "int32", "integer": "int32",
                 "int4": "int32", "bigint": "int64", "int8": "int64", "half": "float16"}


def default_key_names(count: int) -> tuple[str, ...]:
    return tuple(DEFAULT_KEY_NAMES[d] if d < len(DEFAULT_KEY_NAMES) else f"k{d}" for d in range(count))


def parse_dtype(name: Optional[str]) -> np.dtype:
    """A user-facing dtype name to numpy; float32 when none is given."""
    if name is None:
        return np.dtype("float32")
    text = DTYPE_ALIASES.get(name.lower(), name.lower())
    if text == "bfloat16":
        raise ProgrammingError("dtype bfloat16 is not supported on the CPU backend",
                               hint="use float32 or float16")
    if text not in DTYPES:
        raise ProgrammingError(f'unknown dtype "{name}"', hint=did_you_mean(text, (*DTYPES, *DTYPE_ALIASES))
                               or "dtypes: " + ", ".join(DTYPES))
    return np.dtype(text)


@dataclass(frozen=True)
class TensorMeta:
    """A tensor relation: key column names, value column name, dtype, shape and tile shape.

    The tuple with key (K1..Kd) holds T[K1*t1:(K1+1)*t1, ...]; edge tiles hold the remainder.
    When there are more tile axes than keys, the trailing axes are whole (not split by a key).
    """

    name: str
    keys: tuple[str, ...]
    value_name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    tile: tuple[int, ...]
    table: str
    tuple_count: int = 0
    nnz: int = 0
    csr_tuples: int = 0  # stored tuples whose tile is CSR (the rest are dense)
    csr_nnz: int = 0  # non-zeros inside those CSR tiles
    distinct_keys: Optional[tuple[int, ...]] = None  # distinct values of each key column (None: not counted)
    version: int = 0  # names the tile table's contents: every write takes a new one (the buffer pool's key)
    location: Optional[str] = None  # an external tensor's Parquet dataset (its `table` is then '')

    @property
    def external(self) -> bool:
        """Whether the tiles live in a Parquet dataset outside the database (read-only to trdb)."""
        return self.location is not None

    @property
    def grid(self) -> tuple[int, ...]:
        """Number of tiles along each keyed axis."""
        return tuple(-(-n // t) if t else 0 for n, t in zip(self.shape, self.tile))[: len(self.keys)]  # exact: no float

    @property
    def max_tuples(self) -> int:
        return math.prod(self.grid)

    @property
    def density(self) -> float:
        """Non-zeros over all elements of the tensor (absent tiles count as zeros)."""
        total = math.prod(self.shape)
        return self.nnz / total if total else 0.0

    @property
    def dense_tuples(self) -> int:
        """Stored tuples whose tile is a dense array."""
        return self.tuple_count - self.csr_tuples

    @property
    def tile_density(self) -> float:
        """Non-zeros over the elements of the stored tiles: how full a present tile is on average."""
        stored = self.tuple_count * math.prod(self.tile)
        return min(1.0, self.nnz / stored) if stored else 0.0

    def tile_shape_at(self, key: Sequence[int]) -> tuple[int, ...]:
        """The actual shape of the tile stored under `key` (edge tiles are smaller)."""
        # a key past the grid has no tile (0): a crafted 2**63-1 gives no shape too large for int64
        dims = [max(0, min(t, n - k * t)) for k, t, n in zip(key, self.tile, self.shape)]
        return tuple(dims) + self.tile[len(dims):]

    def tile_shape_list(self, keys: np.ndarray) -> "list[tuple[int, ...]] | ShapeList":
        """`tile_shape_at` of each row of an n x m key array, as a list of shape tuples, computed on the whole
        array at once (tiles of one shape share one tuple object), with the same as an array (`ShapeList.array`)."""
        if len(keys) == 0 or keys.shape[1] == 0:
            return [self.tile_shape_at(k) for k in keys.tolist()]
        count = keys.shape[1]
        tile, shape = np.array(self.tile[:count], dtype=np.int64), np.array(self.shape[:count], dtype=np.int64)
        # a key below 0 gives a whole tile, one past the grid none, as any further one does (and no overflow)
        safe = np.clip(keys, -1, np.array(self.grid[:count], dtype=np.int64))
        dims = np.clip(shape - safe * tile, 0, tile)
        full = all_in_rows(dims == tile)  # nearly every tile: the others (edges) are few
        shapes = ShapeList([self.tile] * len(keys))
        edges: dict[tuple, tuple] = {}  # one tuple object per edge shape, as the full tiles share theirs
        for position, row in zip(np.flatnonzero(~full).tolist(), dims[~full].tolist()):
            shape = tuple(row) + tuple(self.tile[count:])
            shapes[position] = edges.setdefault(shape, shape)
        inner = np.broadcast_to(np.array(self.tile[count:], dtype=np.int64), (len(keys), len(self.tile) - count))
        shapes.array = np.concatenate([dims, inner], axis=1)
        return shapes

    def key_in_range(self, key: Sequence[int]) -> bool:
        return all(0 <= k < g for k, g in zip(key, self.grid))

    def tile_shapes_at(self, keys: np.ndarray) -> np.ndarray:
        """`tile_shape_at` of each row of an n x m key array, as an n x rank array."""
        tile, shape, count = np.array(self.tile, dtype=np.int64), np.array(self.shape, dtype=np.int64), keys.shape[1]
        shapes = np.broadcast_to(tile, (len(keys), len(tile))).copy()
        inside = self.keys_in_range(keys)
        safe = np.where(inside[:, None], keys, 0)  # keys * tile of a key outside the grid may overflow int64
        shapes[:, :count] = np.minimum(tile[:count], shape[:count] - safe * tile[:count])
        shapes[~inside, :count] = 0  # no tile there
        return shapes

    def keys_in_range(self, keys: np.ndarray) -> np.ndarray:
        """`key_in_range` of each row of an n x m key array."""
        return all_in_rows((keys >= 0) & (keys < np.array(self.grid, dtype=np.int64)))

    def with_stats(self, tuple_count: int, nnz: int, csr_tuples: int = 0, csr_nnz: int = 0,
                   distinct_keys: Optional[tuple[int, ...]] = None) -> "TensorMeta":
        return replace(self, tuple_count=tuple_count, nnz=nnz, csr_tuples=csr_tuples, csr_nnz=csr_nnz,
                       distinct_keys=distinct_keys)

    def with_version(self, version: int) -> "TensorMeta":
        return replace(self, version=version)


def clamp_tile(shape: Sequence[int], tile: Sequence[int]) -> tuple[int, ...]:
    """A TILE larger than the SHAPE along an axis is cut to the shape: one tile covers that axis."""
    return tuple(min(t, n) if n > 0 else t for n, t in zip(shape, tile)) + tuple(tile[len(shape):])


def validate_layout(shape: Sequence[int], tile: Sequence[int], keys: Optional[Sequence[str]]) -> tuple[str, ...]:
    """Check SHAPE/TILE/key names of a new tensor; return the key names."""
    if len(shape) != len(tile):
        raise ProgrammingError(f"SHAPE {tuple(shape)} and TILE {tuple(tile)} have different ranks")
    for n, t in zip(shape, tile):
        if n < 0 or t <= 0:
            raise ProgrammingError(f"SHAPE {tuple(shape)} / TILE {tuple(tile)}: sizes must be positive")
        if n >= MAX_SIZE or t >= MAX_SIZE:  # keys and offsets are BIGINT
            raise ProgrammingError(f"SHAPE {tuple(shape)} / TILE {tuple(tile)}: sizes must be below 2**63")
    names = tuple(keys) if keys is not None else default_key_names(len(shape))
    if len(names) > len(shape):
        raise ProgrammingError(f"{len(names)} key names given for a {len(shape)}-d tensor")
    for axis in range(len(names), len(shape)):
        if tile[axis] != shape[axis]:
            raise ProgrammingError(f"axis {axis} has no key, so its tile must cover it: TILE {tuple(tile)} for "
                                   f"SHAPE {tuple(shape)} needs {shape[axis]} there",
                                   hint=f"name {len(shape)} keys, or use TILE size {shape[axis]} on axis {axis}")
    if len({n.lower() for n in names}) != len(names):
        raise ProgrammingError(f"duplicate key names in {names}")
    return names


class ShapeList(list):
    """Tile shapes as a list of tuples, with `array`: the same as an (n, rank) int64 array (a read checks a million
    small tiles against their shapes without making that array from the tuples: 0.15 s)."""

    array: np.ndarray
