"""COO entries staged in a DuckDB temp table: read from a file, table or Arrow table, checked, streamed out in batches."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa

from trdb.storage.database import Database
from trdb.storage.sql_text import quote_identifier
from trdb.storage.tensor_meta import TensorMeta

ENTRIES = "_trdb_coo_entries"  # temp table: the named columns of the source, renamed i0.. and v
INPUT = "_trdb_coo_input"  # the name a bound Arrow table is registered under while it is copied
INTEGER_TYPES = frozenset({"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT",
                           "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT"})
FLOAT_TYPES = frozenset({"FLOAT", "DOUBLE"})
_READERS = {"parquet": "read_parquet", "csv": "read_csv"}


@dataclass(frozen=True)
class EntrySource:
    """What DuckDB reads the entries from: a FROM item and its parameters, or an Arrow table it registers."""

    sql: str
    params: tuple = ()
    arrow: Optional[pa.Table] = None


def file_entries(path: str, file_format: str) -> EntrySource:
    """A Parquet or CSV file (file_format 'parquet' or 'csv'), or a glob or URL of them."""
    return EntrySource(f"{_READERS[file_format]}(?)", (path,))


def table_entries(table: str) -> EntrySource:
    """An ordinary table or view."""
    return EntrySource(quote_identifier(table))


def arrow_entries(table: pa.Table) -> EntrySource:
    """An Arrow table bound as a parameter."""
    return EntrySource(INPUT, arrow=table)


def describe_source(db: Database, source: EntrySource) -> list[tuple[str, str]]:
    """(name, DuckDB type) of every column of the source, in order."""
    return [(row[0], row[1]) for row in _run(db, source, f"DESCRIBE SELECT * FROM {source.sql}")]


def stage_entries(db: Database, source: EntrySource, columns: Sequence[str]) -> None:
    """Copy the named columns (index columns, then the value) into the entries table as i0.. and v."""
    names = [f"i{d}" for d in range(len(columns) - 1)] + ["v"]
    chosen = ", ".join(f"{quote_identifier(c)} AS {n}" for c, n in zip(columns, names))
    _run(db, source, f"CREATE OR REPLACE TEMP TABLE {ENTRIES} AS SELECT {chosen} FROM {source.sql}")


def _run(db: Database, source: EntrySource, sql: str) -> list[tuple]:
    if source.arrow is not None:
        return db.register_and_run(INPUT, source.arrow, sql)
    return db.execute(sql, source.params)


def check_staged_entries(db: Database, index_types: Sequence[str],
                         shape: Sequence[int]) -> tuple[list[tuple], int]:
    """One scan of the entries: per index column (NULLs, NaNs, a fractional value, min, max, the count
    outside 0..size-1), and the count of NULL values."""
    probes: list[str] = []
    for d, (sql_type, size) in enumerate(zip(index_types, shape)):
        probes += _index_probes(f"i{d}", sql_type, size)
    probes.append("count(*) - count(v)")
    row = list(db.execute(f"SELECT {', '.join(probes)} FROM {ENTRIES}")[0])
    return [tuple(row[6 * d: 6 * d + 6]) for d in range(len(shape))], row[-1]


def _index_probes(name: str, sql_type: str, size: int) -> list[str]:
    """NULLs, NaNs, a fractional value, min, max and the count out of range, of one index column."""
    is_float = sql_type in FLOAT_TYPES
    number = f" FILTER (WHERE NOT isnan({name}))" if is_float else ""
    fractional = f"{name} <> trunc({name})" + (f" AND NOT isnan({name})" if is_float else "")
    return [f"count(*) - count({name})",
            f"count(*) FILTER (WHERE isnan({name}))" if is_float else "0",
            "NULL" if sql_type in INTEGER_TYPES else f"min({name}) FILTER (WHERE {fractional})",
            f"min({name}){number}", f"max({name}){number}",
            f"count(*) FILTER (WHERE {name} < 0 OR {name} >= {size})"]


def staged_tile_counts(db: Database, meta: TensorMeta) -> tuple[np.ndarray, np.ndarray]:
    """Each tile that has entries (its grid place t, ascending) and its count of entries."""
    table = db.arrow(f"SELECT {_place_sql(meta)} AS t, count(*) AS n FROM {ENTRIES} GROUP BY t ORDER BY t")
    return table.column("t").to_numpy(), table.column("n").to_numpy()


def staged_entry_batches(db: Database, meta: TensorMeta, exact: bool, rows: int) -> Iterator[pa.RecordBatch]:
    """The entries as (t, k0.., p, v), unsorted, `rows` at a time, streamed: t the tile's place in the grid
    (C order), p the C-order offset inside the tile, v the value (BIGINT when `exact`, else DOUBLE). Read
    them all before the next statement on this connection."""
    return db.arrow_batches(_entries_sql(meta, exact), rows)


def drop_staged_entries(db: Database) -> None:
    db.execute(f"DROP TABLE IF EXISTS {ENTRIES}")


def _place_sql(meta: TensorMeta) -> str:
    place = "0"
    for d in range(len(meta.keys)):
        place = f"({place}) * {meta.grid[d]} + CAST(i{d} AS BIGINT) // {meta.tile[d]}"
    return place


def _entries_sql(meta: TensorMeta, exact: bool) -> str:
    """Not sorted in DuckDB: within a small memory_limit its sort of tens of millions of rows is slow (one
    thread); trdb buckets the entries by tile range and sorts each bucket in numpy (statements/coo.py)."""
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
    return (f"SELECT {', '.join([_place_sql(meta) + ' AS t'] + keys + [position + ' AS p', 'v'])} "
            f"FROM (SELECT {index}, {value} FROM {ENTRIES})")
