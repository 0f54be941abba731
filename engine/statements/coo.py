"""CREATE TENSOR ... FROM COO: (index..., value) entries read, checked and bucketed into tiles by DuckDB."""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import pyarrow as pa

from trdb.catalog.names import did_you_mean, fold
from trdb.errors import DataError, OperationalError, ProgrammingError, QueryCancelled
from trdb.execution.result import Result
from trdb.ingest.array_inputs import is_sparse_matrix
from trdb.ingest.coo_buckets import sorted_entry_batches
from trdb.ingest.coo_tiles import format_number as _number
from trdb.ingest.coo_tiles import write_entries
from trdb.ingest.npy_files import check_storable
from trdb.kernels.sparse_input import checked_sparse
from trdb.parser import ast
from trdb.pipeline.limits import check_stored, check_tile, may_be_sparse
from trdb.statements.context import StatementContext
from trdb.storage import coo_staging
from trdb.storage.coo_staging import FLOAT_TYPES as _FLOAT_TYPES
from trdb.storage.coo_staging import INTEGER_TYPES as _INTEGER_TYPES
from trdb.storage.coo_staging import EntrySource
from trdb.storage.tensor_meta import TensorMeta, clamp_tile, parse_dtype, validate_layout

# Entries of one bucket: about 32 bytes each as read, and as many again while they are sorted, duplicates
# summed and tiles built. A bucket takes an eighth of the budget, at most 64 MB: larger ones were slower
# (40M entries in one 4 GB bucket took three times as long as in 64 MB buckets spilled to disk).
ENTRY_BATCH_BYTES = 64 << 20
_ENTRY_BYTES = 64
_PARQUET = (".parquet", ".parq", ".pq")
_CSV = (".csv", ".tsv", ".txt", ".csv.gz", ".tsv.gz", ".csv.zst")


@dataclass(frozen=True)
class Source:
    """Where the entries come from (a file, an ordinary table or a bound Arrow table) and how messages name it."""

    label: str  # how messages name it: 'edges.parquet', table "edges", parameter 1
    entries: EntrySource
    positional: bool = False  # a scipy.sparse matrix: the statement's names label (row, col, data) in order
    is_file: bool = False  # DuckDB's errors reading it are about the source (a file, or a query as written)
    where: Any = None  # the node a caret goes under for them (else the statement)


@dataclass(frozen=True)
class Column:
    name: str  # as the source spells it
    type: str  # DuckDB type


def create_tensor_from_coo(sc: StatementContext, node: ast.CreateTensorFromCoo) -> Result:
    tile = clamp_tile(node.shape, node.tile)
    keys = validate_layout(node.shape, tile, node.keys)
    dtype = parse_dtype(node.dtype)
    meta = TensorMeta(node.name, keys, "v", dtype, tuple(node.shape), tile, "")
    if not may_be_sparse(meta):  # its tiles are dense however few entries they hold: refused before reading
        check_tile(sc.settings, meta)
    _check_rank(sc, node)
    sc.catalog.check_new_name(node.name)
    source = _source(sc, node)
    with _reading(sc, node, source):
        columns = _resolve_columns(sc, node, source)
        coo_staging.stage_entries(sc.db, source.entries, [c.name for c in columns])
    _validate(sc, node, columns)
    counts = coo_staging.staged_tile_counts(sc.db, meta)  # tiles judged by their entries, not TILE's dense size
    check_stored(sc.settings, meta, sc.db.room(), counts[1])
    meta = sc.catalog.create_tensor(meta)
    exact = columns[-1].type in _INTEGER_TYPES | {"BOOLEAN"} and dtype.kind in "biu"
    # not in a `finally`: after a failure the statement's transaction is rolled back, the temporary table
    # with it, and dropping it in the aborted transaction would fail and hide the error that counts
    _write_sorted(sc, meta, exact, counts)
    coo_staging.drop_staged_entries(sc.db)
    sc.catalog.refresh_statistics(meta)
    return Result(rowcount=0)


def _write_sorted(sc: StatementContext, meta: TensorMeta, exact: bool, counts: tuple) -> None:
    """Build and write the tiles from the entries sorted a bucket of whole tiles at a time (duplicates of one
    coordinate are in one tile, so each bucket sums its own); `counts`: staged_tile_counts."""
    per_bucket = max(1, min(ENTRY_BATCH_BYTES, sc.db.file.memory.budget // 8) // _ENTRY_BYTES)
    for entries in sorted_entry_batches(sc.db, meta, exact, per_bucket, sc.interrupted.is_set, counts):
        write_entries(sc.db, meta, entries)


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
    if isinstance(node.source, ast.SubqueryRef):
        return _query_source(sc, node.source)
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
        if source.where is not None and isinstance(exc, ProgrammingError):
            error = ProgrammingError  # a query that DuckDB cannot bind is a mistake in it, not in data
        raise sc.bind.fail(source.where or node, f"cannot read {source.label}: {exc.message.splitlines()[0]}",
                           error=error) from None


def _file_source(sc: StatementContext, node: ast.CreateTensorFromCoo, path: str) -> Source:
    lower = path.lower()
    file_format = "parquet" if lower.endswith(_PARQUET) else "csv" if lower.endswith(_CSV) else None
    if file_format is None:
        raise sc.bind.fail(node, f"cannot tell the format of '{path}' from its name",
                           hint="FROM COO reads Parquet (.parquet) and CSV (.csv) files")
    remote_or_glob = "://" in path or any(ch in path for ch in "*?[")
    if not remote_or_glob and not os.path.exists(path):
        raise sc.bind.fail(node, f"cannot read '{path}': no such file",
                           hint=f"paths are relative to {os.getcwd()}", error=OperationalError)
    return Source(f"'{path}'", coo_staging.file_entries(path, file_format), is_file=True)


def _table_source(sc: StatementContext, ref: ast.TableRef) -> Source:
    found = sc.catalog.ordinary_table(ref.name)
    if found is None:
        if sc.catalog.tensor(ref.name) or sc.catalog.view(ref.name):
            raise sc.bind.fail(ref, f'"{ref.name}" is a tensor relation or a trdb view; FROM COO reads '
                                    "an ordinary table, a Parquet or CSV file, or a bound parameter")
        raise sc.bind.fail(ref, f'table "{ref.name}" does not exist',
                           hint=did_you_mean(ref.name, sc.catalog.ordinary_tables()))
    return Source(f'table "{found[0]}"', coo_staging.table_entries(found[0]))


def _query_source(sc: StatementContext, ref: ast.SubqueryRef) -> Source:
    """A query over ordinary tables, as written (DuckDB runs it: its SQL, its functions); a query that reads a tensor
    relation or a trdb view gives tiles, not entries, and names no table DuckDB knows."""
    ctes = {fold(c.name) for n in ast.walk(ref.query) if isinstance(n, ast.Query) for c in n.ctes}
    for node in ast.walk(ref.query):
        if isinstance(node, ast.Param):
            raise sc.bind.fail(node, "FROM COO (query) takes no parameters",
                               hint="bind the entries themselves: FROM COO ? with a pyarrow Table or DataFrame")
        if not isinstance(node, ast.TableRef) or fold(node.name) in ctes:
            continue
        if sc.catalog.tensor(node.name) or sc.catalog.view(node.name):
            raise sc.bind.fail(node, f'"{node.name}" is a tensor relation or a trdb view; FROM COO (query) reads '
                                     "ordinary tables",
                               hint="COPY a tensor TO 'file.parquet' (LAYOUT long) for its entries")
        if sc.catalog.ordinary_table(node.name) is None:
            raise sc.bind.fail(node, f'table "{node.name}" does not exist',
                               hint=did_you_mean(node.name, sc.catalog.ordinary_tables()))
    text = sc.text[ref.span.start:ref.span.end]
    return Source("the query", EntrySource(text), is_file=True, where=ref)


def _param_source(sc: StatementContext, node: ast.CreateTensorFromCoo, value: Any) -> Source:
    label = f"parameter {node.source.index + 1}"
    if isinstance(value, pa.RecordBatch):
        value = pa.Table.from_batches([value])
    if isinstance(value, pa.Table):
        return Source(label, coo_staging.arrow_entries(value))
    if type(value).__module__.startswith("pandas") and hasattr(value, "columns"):
        for name, dtype in getattr(value, "dtypes", {}).items():  # Arrow has no complex type: said here, plainly
            if getattr(dtype, "kind", None) == "c":
                check_storable(dtype, f"column {name!r} of the DataFrame of {label}", "pass its .real or abs() instead")
        try:
            return Source(label, coo_staging.arrow_entries(pa.Table.from_pandas(value)))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise sc.bind.fail(node.source, f"cannot read the DataFrame of {label}: {exc}",
                               error=DataError) from None
    if is_sparse_matrix(value):  # scipy.sparse
        coo = checked_sparse(value, f"the scipy.sparse matrix of {label}").tocoo()
        if coo.ndim != 2:
            raise sc.bind.fail(node.source, f"{label} is a {coo.ndim}-d sparse array; FROM COO ? takes 2-d ones")
        if len(node.columns) != 3:
            raise sc.bind.fail(node, f"{label} is a scipy.sparse matrix: FROM COO takes its (row, col, data) "
                                     f"as 3 columns, not {len(node.columns)}")
        check_storable(coo.data.dtype, f"the scipy.sparse matrix of {label}", "pass m.real or abs(m) instead")
        table = pa.table({"row": coo.row, "col": coo.col, "data": coo.data})
        return Source(label, coo_staging.arrow_entries(table), positional=True)
    raise sc.bind.fail(node.source, f"FROM COO ? takes a pyarrow Table, a pandas DataFrame or a scipy.sparse "
                                    f"matrix, got {type(value).__name__}",
                       hint="a dense array is loaded with CREATE TENSOR ... FROM ? TILE (...)")


def _resolve_columns(sc: StatementContext, node: ast.CreateTensorFromCoo, source: Source) -> list[Column]:
    """The source's columns named in the statement (index columns, then the value), with their types."""
    described = [Column(name, sql_type) for name, sql_type in coo_staging.describe_source(sc.db, source.entries)]
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


# ------------------------------------------------------------ validation

def _validate(sc: StatementContext, node: ast.CreateTensorFromCoo, columns: list[Column]) -> None:
    """Every index present, an integer and inside SHAPE; every value present. One scan of the entries."""
    axes, null_values = coo_staging.check_staged_entries(sc.db, [c.type for c in columns[:-1]], node.shape)
    for d, (nulls, nans, fraction, low, high, outside) in enumerate(axes):
        problem = _index_problem(node.columns[d], d, tuple(node.shape), nulls, nans, fraction, low, high, outside)
        if problem:
            raise sc.bind.fail(node, problem, error=DataError)
    if null_values:
        raise sc.bind.fail(node, f'value column "{node.columns[-1]}" has {null_values} NULL value(s)',
                           hint="every entry needs a value; leave zero entries out or give 0", error=DataError)


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

