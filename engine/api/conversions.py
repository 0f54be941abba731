"""Results to host values, Arrow tables, numpy columns and scipy.sparse matrices."""
from __future__ import annotations

import re
from typing import Iterable, Optional, Sequence

import numpy as np
import pyarrow as pa
import scipy.sparse

from trdb.errors import DataError, InterfaceError, NotSupportedError
from trdb.execution.result import check_fits, check_unique_keys, layout_of, tile_slices
from trdb.kernels.sparse import is_sparse, row_indices
from trdb.plan.types import Schema


def _column_names(schema: Optional[Schema], description) -> list[str]:
    if schema is not None:
        return [c.name for c in schema]
    return [d[0] for d in description or ()]


def _tensor_column(values: list, nominal: Optional[tuple] = None) -> tuple[pa.Array, Optional[pa.Array], bool]:
    """A fixed_shape_tensor column of the nominal tile shape (where every tile fits it, else the largest);
    ragged (edge) tiles are zero-padded: each tile's own shape is given aside, and whether any was ragged."""
    arrays = [np.asarray(v) for v in values]
    if not arrays:
        return pa.array([], pa.null()), None, False
    if arrays[0].ndim == 0:  # 0-d tiles are plain numbers, of the tiles' dtype (float32 stays float32)
        return pa.array(np.stack(arrays)), None, False
    full = tuple(max(s) for s in zip(*(a.shape for a in arrays)))
    if nominal is not None and len(nominal) == len(full) and all(f <= n for f, n in zip(full, nominal)):
        full = nominal
    ragged = any(a.shape != full for a in arrays)
    stacked = np.zeros((len(arrays),) + full, dtype=arrays[0].dtype)
    for target, array in zip(stacked, arrays):
        target[tuple(slice(0, n) for n in array.shape)] = array
    shapes = pa.array([list(a.shape) for a in arrays], pa.list_(pa.int64()))
    return _fixed_shape_tensors(stacked), shapes, ragged


def _fixed_shape_tensors(stacked: np.ndarray) -> pa.Array:
    """One Arrow fixed_shape_tensor per row of `stacked`; tiles with no values (a dimension of 0) too, which
    pyarrow's from_numpy_ndarray refuses. Tiles of a dtype Arrow has no type for (complex) are refused."""
    try:
        value_type = pa.from_numpy_dtype(stacked.dtype)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        raise NotSupportedError(f"Arrow has no type for {stacked.dtype} tiles",
                                hint="fetchall() or fetch_tensor() return them as numpy arrays") from None
    if stacked.size:
        return pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(stacked))
    storage = pa.array([[]] * len(stacked), pa.list_(value_type, 0))
    return pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(value_type, stacked.shape[1:]), storage)


def result_to_arrow(schema: Optional[Schema], description, batches: Iterable[Sequence[tuple]]) -> pa.Table:
    """The rows, given batch by batch, as one Arrow table: only one batch is held as Python values at a time.
    A tensor column is followed by a `<name>_shape` column only when some tile is ragged."""
    names = _column_names(schema, description)
    parts: list[tuple[pa.Table, dict]] = []
    ragged: set[str] = set()
    for rows in batches:
        if rows:
            parts.append(_arrow_batch(schema, description, names, rows, ragged))
    if not parts:
        parts.append(_arrow_batch(schema, description, names, [], ragged))
    tables = []
    for table, shapes in parts:
        for name in [n for n in names if n in ragged]:
            table = table.add_column(table.schema.get_field_index(name) + 1, f"{name}_shape", shapes[name])
        tables.append(table)
    return _concatenated(tables) if len(tables) > 1 else tables[0]


def _concatenated(tables: list[pa.Table]) -> pa.Table:
    """The batches as one table; a plain column whose batches were inferred as different types (DESCRIBE's
    shape: counts in one batch, a list in another) becomes text in every batch, as one batch alone would."""
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    mixed = {name for name in tables[0].column_names
             if len({t.schema.field(name).type for t in tables} - {pa.null()}) > 1}
    as_text = []
    for table in tables:
        for name in mixed:
            index = table.schema.get_field_index(name)
            values = [None if v is None else str(v) for v in table.column(index).to_pylist()]
            table = table.set_column(index, name, pa.array(values, pa.string()))
        as_text.append(table)
    return pa.concat_tables(as_text, promote_options="permissive")


def _arrow_batch(schema, description, names: list[str], rows: Sequence[tuple], ragged: set[str]):
    """One batch of rows as an Arrow table, and each tensor column's tile shapes (kept aside for ragged ones)."""
    columns, shapes = [], {}
    for position, name in enumerate(names):
        values = [row[position] for row in rows]
        if schema is not None and schema[position].is_tensor:
            tensor, shapes[name], is_ragged = _tensor_column(values, tuple(schema[position].type.tile))
            columns.append(tensor)
            if is_ragged:
                ragged.add(name)
        else:
            type_code = schema[position].type if schema is not None else description[position][1]
            columns.append(_arrow_column(values, arrow_type(type_code)))
    return pa.Table.from_arrays(columns, names=names), shapes


_ARROW_TYPES = {
    "BOOLEAN": pa.bool_(), "TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INTEGER": pa.int32(),
    "BIGINT": pa.int64(), "UTINYINT": pa.uint8(), "USMALLINT": pa.uint16(), "UINTEGER": pa.uint32(),
    "UBIGINT": pa.uint64(), "FLOAT": pa.float32(), "DOUBLE": pa.float64(), "VARCHAR": pa.string(),
    "BLOB": pa.binary(), "DATE": pa.date32(), "TIME": pa.time64("us"), "TIMESTAMP": pa.timestamp("us"),
    "TIMESTAMP_S": pa.timestamp("s"), "TIMESTAMP_MS": pa.timestamp("ms"), "TIMESTAMP_NS": pa.timestamp("ns"),
    "INTERVAL": pa.month_day_nano_interval(),
}
_DECIMAL = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")
_NESTED = re.compile(r"(.+)\[(\d*)\]")  # DuckDB's LIST (`INTEGER[]`) and ARRAY (`INTEGER[3]`) of a type


def arrow_type(type_code) -> Optional[pa.DataType]:
    """The Arrow type DuckDB gives a column of this type (its description's type code, a list `T[]` or an
    array `T[n]` of those too); None: inferred."""
    text = str(type_code).upper().strip()
    nested = _NESTED.fullmatch(text)
    if nested:
        item = arrow_type(nested.group(1))
        if item is None:
            return None
        return pa.list_(item) if not nested.group(2) else pa.list_(item, int(nested.group(2)))
    decimal = _DECIMAL.fullmatch(text)
    if decimal:
        return pa.decimal128(int(decimal.group(1)), int(decimal.group(2)))
    return _ARROW_TYPES.get(text)


def _arrow_column(values: list, type_: Optional[pa.DataType] = None) -> pa.Array:
    """Plain values as an Arrow column of the column's type where it is known (a float32 column stays float32);
    else inferred; a column mixing types (DESCRIBE's shape: counts and lists) as text."""
    for attempt in (type_, None):
        try:
            return pa.array(values, attempt)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError,
                OverflowError):  # an integer beyond int64 where the type is not known (inferred as int64)
            continue
    return pa.array([None if v is None else str(v) for v in values], pa.string())


def _numpy_column(values: list) -> np.ndarray:
    """Plain values as a numpy column; lists of differing lengths (or other ragged values) as objects."""
    try:
        return np.array(values)
    except ValueError:  # ragged: one object per row
        column = np.empty(len(values), dtype=object)
        for n, value in enumerate(values):
            column[n] = value
        return column


def result_to_numpy(schema: Optional[Schema], description, rows: Sequence[tuple]) -> dict[str, np.ndarray]:
    names = _column_names(schema, description)
    out: dict[str, np.ndarray] = {}
    for position, name in enumerate(names):
        values = [row[position] for row in rows]
        if schema is not None and schema[position].is_tensor:
            shapes = {np.shape(v) for v in values}
            if len(shapes) == 1:
                out[name] = np.stack([np.asarray(v) for v in values])
            else:
                out[name] = np.empty(len(values), dtype=object)
                out[name][:] = [np.asarray(v) for v in values]
        else:
            out[name] = _numpy_column(values)
    return out


def result_to_sparse(schema: Schema, rows: Sequence[tuple], shape: Optional[Sequence[int]] = None,
                     limits: Optional[dict] = None) -> scipy.sparse.csr_matrix:
    """A 2-d result as one CSR matrix, from the stored values of CSR tiles and the non-zeros of dense ones;
    `shape` as in fetch_tensor (absent trailing tiles are zeros); float16 becomes float32, which scipy has.
    `limits`: the most bytes the matrix may take (as in assemble)."""
    layout = layout_of(schema, rows, shape)
    check_unique_keys(rows, layout.key_positions)
    if len(layout.shape) != 2:
        raise InterfaceError(f"fetch_sparse() needs a 2-d result, this one has shape {layout.shape}")
    dtype = np.dtype(np.float32) if layout.dtype == np.float16 else np.dtype(layout.dtype)
    stored = sum(_stored(row[layout.value_position]) for row in rows)
    check_fits("fetch_sparse()", (layout.shape[0] + 1) * 8 + stored * (8 + dtype.itemsize), layout.shape, limits)
    rows_idx, cols_idx, data = [], [], []
    for row in rows:
        start = tile_slices(layout, row)
        r, c, values = _tile_entries(row[layout.value_position], tuple(s.stop - s.start for s in start))
        rows_idx.append(r + start[0].start)
        cols_idx.append(c + start[1].start)
        data.append(values)
    if not data:
        return scipy.sparse.csr_matrix(layout.shape, dtype=dtype)
    rows_at, cols_at = np.concatenate(rows_idx), np.concatenate(cols_idx)
    if rows_at.max(initial=-1) >= layout.shape[0] or cols_at.max(initial=-1) >= layout.shape[1]:
        raise DataError(f"the result has non-zeros outside the shape {layout.shape}")
    coo = scipy.sparse.coo_matrix((np.concatenate(data).astype(dtype, copy=False), (rows_at, cols_at)),
                                  shape=layout.shape)
    return coo.tocsr()


def _stored(tile) -> int:
    """How many values a tile may contribute: its stored values (CSR) or elements (dense)."""
    return int(tile.nnz) if is_sparse(tile) else int(np.size(tile))


def _tile_entries(tile, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, column, value) of a tile's non-zeros, positions relative to the tile."""
    if is_sparse(tile):
        kept = tile.data != 0  # a computed CSR tile may hold explicit zeros
        rows = row_indices(tile).astype(np.int64)
        return rows[kept], tile.indices[kept].astype(np.int64), tile.data[kept]
    tile = np.asarray(tile).reshape(shape)
    r, c = np.nonzero(tile)
    return r, c, tile[r, c]


def result_to_pandas(schema: Optional[Schema], description, rows: Sequence[tuple]):
    """A pandas DataFrame: plain columns through their Arrow type (as DuckDB's df() types them), per-tile
    scalars (0-d tiles) as a numeric column of their dtype, larger tiles as an object column of arrays."""
    import pandas as pd  # only df() needs pandas

    data = {}
    for position, name in enumerate(_column_names(schema, description)):
        values = [row[position] for row in rows]
        if schema is not None and schema[position].is_tensor:
            if values and all(np.ndim(v) == 0 for v in values):
                data[name] = np.stack([np.asarray(v) for v in values])
            else:
                column = np.empty(len(values), dtype=object)
                for n, value in enumerate(values):
                    column[n] = np.asarray(value)
                data[name] = column
        else:
            type_code = schema[position].type if schema is not None else description[position][1]
            data[name] = _arrow_column(values, arrow_type(type_code)).to_pandas()
    return pd.DataFrame(data, columns=_column_names(schema, description))


def polars_module():
    """polars, which only pl() needs and trdb does not require; an InterfaceError that says how to install it."""
    try:
        import polars
    except ImportError:
        raise InterfaceError("pl() needs polars, which is not installed",
                             hint="pip install polars (or fetch a pandas DataFrame with df(), Arrow with "
                                  "to_arrow_table())") from None
    return polars


def arrow_to_polars(table: pa.Table):
    """A polars DataFrame of an Arrow table (as fetch_arrow() gives it): a tensor column becomes a polars Array
    column of the tile's shape, the other columns keep their Arrow types."""
    pl = polars_module()
    columns = []
    for name, column in zip(table.column_names, table.columns):
        if isinstance(column.type, pa.FixedShapeTensorType):
            columns.append(pl.Series(name, column.combine_chunks().to_numpy_ndarray()))
        else:
            columns.append(pl.from_arrow(column).alias(name))
    return pl.DataFrame(columns)
