"""CREATE TENSOR ... FROM COO: (index..., value) entries read, checked and bucketed into tiles by DuckDB."""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import pyarrow as pa

from trdb.catalog.names import did_you_mean, fold
from trdb.storage.tensor_meta import TensorMeta, clamp_tile, parse_dtype, validate_layout
from trdb.errors import DataError, OperationalError, ProgrammingError, QueryCancelled
from trdb.execution.result import Result
from trdb.parser import ast
from trdb.statements.context import StatementContext
from trdb.statements.coo_tiles import format_number as _number, write_entries
from trdb.pipeline.limits import check_tile
from trdb.storage.database import Database

ENTRIES = "_trdb_coo_entries"  # temp table: the named columns of the source, renamed i0.. and v
INPUT = "_trdb_coo_input"  # the name a bound Arrow table is registered under while it is copied
_INTEGER_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT",
                  "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT"}
_FLOAT_TYPES = {"FLOAT", "DOUBLE"}
_PARQUET = (".parquet", ".parq", ".pq")
_CSV = (".csv", ".tsv", ".txt", ".csv.gz", ".tsv.gz", ".csv.zst")


@dataclass(frozen=True)
class Source:
    """Where the entries come from: a FROM item for DuckDB, its parameters, or a bound Arrow table."""

    label: str  # how messages name it: 'edges.parquet', table "edges", parameter 1
    sql: str
    params: tuple = ()
    arrow: Optional[pa.Table] = None
    positional: bool = False  # a scipy.sparse matrix: the statement's names label (row, col, data) in order
    is_file: bool = False

    def run(self, db: Database, sql: str) -> list[tuple]:
        if self.arrow is not None:
            return db.register_and_run(INPUT, self.arrow, sql)
        return db.execute(sql, self.params)


@dataclass(frozen=True)
class Column:
    name: str  # as the source spells it
    type: str  # DuckDB type


def create_tensor_from_coo(sc: StatementContext, node: ast.CreateTensorFromCoo) -> Result:
    tile = clamp_tile(node.shape, node.tile)
    keys = validate_layout(node.shape, tile, node.keys)
    dtype = parse_dtype(node.dtype)
    check_tile(sc.settings, TensorMeta(node.name, keys, "v", dtype, tuple(node.shape), tile, ""))
    _check_rank(sc, node)
    sc.catalog.check_new_name(node.name)
    source = _source(sc, node)
    with _reading(sc, node, source):
        columns = _resolve_columns(sc, node, source)
        source.run(sc.db, f"CREATE OR REPLACE TEMP TABLE {ENTRIES} AS SELECT "
                   + ", ".join(f"{_quote(c.name)} AS {n}" for c, n in zip(columns, _entry_names(columns)))
                   + f" FROM {source.sql}")
    _validate(sc, node, columns)
    meta = sc.catalog.create_tensor(TensorMeta(node.name, keys, "v", dtype, tuple(node.shape), tile, ""))
    exact = columns[-1].type in _INTEGER_TYPES | {"BOOLEAN"} and dtype.kind in "biu"
    entries = sc.db.arrow(_entries_sql(meta, exact))
    sc.db.execute(f"DROP TABLE {ENTRIES}")
    write_entries(sc.db, meta, entries)
    sc.catalog.refresh_statistics(meta)
    return Result(rowcount=0)


# ------------------------------------------------------------ the source and its columns

def _check_rank(sc: StatementContext, node: ast.CreateTensorFromCoo) -> None:
    if len(node.columns) != len(node.shape) + 1:
        raise sc.bind.fail(node, f"FROM COO names {len(node.columns) - 1} index column(s) and a value column, "
                                 f"but SHAPE {tuple(node.shape)} has {len(node.shape)} axes",
                           hint="name one index column per axis, then the value column")


def _source(sc: StatementContext, node: ast.CreateTensorFromCoo) -> Source:
    if isinstance(node.source, ast.Param):
        return _param_source(sc, node, sc.param(node.source))
    if isinstance(node.source, ast.TableRef):
        return _table_source(sc, node.source)
    return _file_source(sc, node, node.source)


@contextmanager
def _reading(sc: StatementContext, node: ast.CreateTensorFromCoo, source: Source) -> Iterator[None]:
    """DuckDB's errors about a file (not Parquet, a bad CSV row) as ours, without DuckDB's internal query."""
    try:
        yield
    except QueryCancelled:
        raise
    except (ProgrammingError, DataError, OperationalError) as exc:
        if not source.is_file or exc.statement is not None:  # ours already, or not about a file
            raise
        error = OperationalError if isinstance(exc, OperationalError) else DataError
        raise sc.bind.fail(node, f"cannot read {source.label}: {exc.message.splitlines()[0]}",
                           error=error) from None


def _file_source(sc: StatementContext, node: ast.CreateTensorFromCoo, path: str) -> Source:
    lower = path.lower()
    reader = "read_parquet" if lower.endswith(_PARQUET) else "read_csv" if lower.endswith(_CSV) else None
    if reader is None:
        raise sc.bind.fail(node, f"cannot tell the format of '{path}' from its name",
                           hint="FROM COO reads Parquet (.parquet) and CSV (.csv) files")
    remote_or_glob = "://" in path or any(ch in path for ch in "*?[")
    if not remote_or_glob and not os.path.exists(path):
        raise sc.bind.fail(node, f"cannot read '{path}': no such file",
                           hint=f"paths are relative to {os.getcwd()}", error=OperationalError)
    return Source(f"'{path}'", f"{reader}(?)", (path,), is_file=True)


def _table_source(sc: StatementContext, ref: ast.TableRef) -> Source:
    found = sc.catalog.ordinary_table(ref.name)
    if found is None:
        if sc.catalog.tensor(ref.name) or sc.catalog.view(ref.name):
            raise sc.bind.fail(ref, f'"{ref.name}" is a tensor relation or a trdb view; FROM COO reads '
                                    "an ordinary table, a Parquet or CSV file, or a bound parameter")
        raise sc.bind.fail(ref, f'table "{ref.name}" does not exist',
                           hint=did_you_mean(ref.name, sc.catalog.ordinary_tables()))
    return Source(f'table "{found[0]}"', _quote(found[0]))


def _param_source(sc: StatementContext, node: ast.CreateTensorFromCoo, value: Any) -> Source:
    label = f"parameter {node.source.index + 1}"
    if isinstance(value, pa.RecordBatch):
        value = pa.Table.from_batches([value])
    if isinstance(value, pa.Table):
        return Source(label, INPUT, arrow=value)
    if type(value).__module__.startswith("pandas") and hasattr(value, "columns"):
        try:
            return Source(label, INPUT, arrow=pa.Table.from_pandas(value))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise sc.bind.fail(node.source, f"cannot read the DataFrame of {label}: {exc}",
                               error=DataError) from None
    if hasattr(value, "tocoo") and hasattr(value, "nnz"):  # scipy.sparse
        coo = value.tocoo()
        if coo.ndim != 2:
            raise sc.bind.fail(node.source, f"{label} is a {coo.ndim}-d sparse array; FROM COO ? takes 2-d ones")
        if len(node.columns) != 3:
            raise sc.bind.fail(node, f"{label} is a scipy.sparse matrix: FROM COO takes its (row, col, data) "
                                     f"as 3 columns, not {len(node.columns)}")
        table = pa.table({"row": coo.row, "col": coo.col, "data": coo.data})
        return Source(label, INPUT, arrow=table, positional=True)
    raise sc.bind.fail(node.source, f"FROM COO ? takes a pyarrow Table, a pandas DataFrame or a scipy.sparse "
                                    f"matrix, got {type(value).__name__}",
                       hint="a dense array is loaded with CREATE TENSOR ... FROM ? TILE (...)")


def _resolve_columns(sc: StatementContext, node: ast.CreateTensorFromCoo, source: Source) -> list[Column]:
    """The source's columns named in the statement (index columns, then the value), with their types."""
    described = [Column(row[0], row[1]) for row in source.run(sc.db, f"DESCRIBE SELECT * FROM {source.sql}")]
    if source.positional:
        chosen = described
    else:
        by_name = {fold(c.name): c for c in described}
        chosen = []
        for name in node.columns:
            if fold(name) not in by_name:
                names = [c.name for c in described]
                raise sc.bind.fail(node, f'column "{name}" does not exist in {source.label}',
                                   hint=did_you_mean(name, names) or "its columns are " + ", ".join(names))
            chosen.append(by_name[fold(name)])
    for given, column in zip(node.columns, chosen[:-1]):
        if column.type not in _INTEGER_TYPES | _FLOAT_TYPES and not column.type.startswith("DECIMAL"):
            raise sc.bind.fail(node, f'index column "{given}" has type {column.type}: indices must be integers',
                               error=DataError)
    value = chosen[-1]
    if not (value.type in _INTEGER_TYPES | _FLOAT_TYPES | {"BOOLEAN"} or value.type.startswith("DECIMAL")):
        raise sc.bind.fail(node, f'value column "{node.columns[-1]}" has type {value.type}: values must be '
                                 "numbers or booleans", error=DataError)
    return chosen


def _entry_names(columns: list[Column]) -> list[str]:
    return [f"i{d}" for d in range(len(columns) - 1)] + ["v"]


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# ------------------------------------------------------------ validation

def _validate(sc: StatementContext, node: ast.CreateTensorFromCoo, columns: list[Column]) -> None:
    """Every index present, an integer and inside SHAPE; every value present. One scan of the entries."""
    probes: list[str] = []
    for d, (column, size) in enumerate(zip(columns, node.shape)):
        probes += _index_probes(f"i{d}", column.type, size)
    probes.append("count(*) - count(v)")
    row = list(sc.db.execute(f"SELECT {', '.join(probes)} FROM {ENTRIES}")[0])
    for d, size in enumerate(node.shape):
        nulls, nans, fraction, low, high, outside = row[6 * d: 6 * d + 6]
        problem = _index_problem(node.columns[d], d, tuple(node.shape), nulls, nans, fraction, low, high, outside)
        if problem:
            raise sc.bind.fail(node, problem, error=DataError)
    if row[-1]:
        raise sc.bind.fail(node, f'value column "{node.columns[-1]}" has {row[-1]} NULL value(s)',
                           hint="every entry needs a value; leave zero entries out or give 0", error=DataError)


def _index_probes(name: str, sql_type: str, size: int) -> list[str]:
    """NULLs, NaNs, a fractional value, min, max and the count out of range, of one index column."""
    is_float = sql_type in _FLOAT_TYPES
    number = f" FILTER (WHERE NOT isnan({name}))" if is_float else ""
    fractional = f"{name} <> trunc({name})" + (f" AND NOT isnan({name})" if is_float else "")
    return [f"count(*) - count({name})",
            f"count(*) FILTER (WHERE isnan({name}))" if is_float else "0",
            "NULL" if sql_type in _INTEGER_TYPES else f"min({name}) FILTER (WHERE {fractional})",
            f"min({name}){number}", f"max({name}){number}",
            f"count(*) FILTER (WHERE {name} < 0 OR {name} >= {size})"]


def _index_problem(column: str, axis: int, shape: tuple, nulls: int, nans: int, fraction: Any,
                   low: Any, high: Any, outside: int) -> Optional[str]:
    where = f'index column "{column}"'
    if nulls:
        return f"{where} has {nulls} NULL (missing) value(s); every entry needs an index on every axis"
    if nans:
        return f"{where} holds NaN ({_entry_count(nans)}): indices must be integers"
    if fraction is not None:
        return f"{where} holds {_number(fraction)}, which is not an integer"
    if outside:
        bad = low if low < 0 else high
        return (f"{where} holds {_number(bad)}, out of range: axis {axis} of SHAPE {shape} has size "
                f"{shape[axis]}, so indices run from 0 to {shape[axis] - 1} ({_entry_count(outside)} out of range)")
    return None


def _entry_count(count: int) -> str:
    return f"{count} entry" if count == 1 else f"{count} entries"


# ------------------------------------------------------------ bucketing into tiles

def _entries_sql(meta: TensorMeta, exact: bool) -> str:
    """Entries as (tile key, C-order offset inside the tile, value), sorted so duplicates are adjacent.

    A sort, not GROUP BY: the sort is needed anyway, and DuckDB's hash aggregation over millions of
    distinct coordinates costs twice as much as the sort; duplicates are summed in numpy instead.
    """
    index = ", ".join(f"CAST(i{d} AS BIGINT) AS i{d}" for d in range(len(meta.shape)))
    value = f"CAST(v AS {'BIGINT' if exact else 'DOUBLE'}) AS v"
    position = "0"
    for d, (tile, size) in enumerate(zip(meta.tile, meta.shape)):
        if d < len(meta.keys):  # edge tiles are smaller: the stride comes from the tile's actual extent
            width, local = f"least({tile}, {size} - (i{d} // {tile}) * {tile})", f"i{d} % {tile}"
        else:  # an unkeyed axis: every tile covers it whole
            width, local = str(tile), f"i{d}"
        position = f"({position}) * {width} + {local}"
    keys = [f"i{d} // {meta.tile[d]} AS k{d}" for d in range(len(meta.keys))]
    order = [f"k{d}" for d in range(len(meta.keys))] + ["p"]
    return (f"SELECT {', '.join(keys + [position + ' AS p', 'v'])} FROM (SELECT {index}, {value} FROM {ENTRIES}) "
            f"ORDER BY {', '.join(order)}")
