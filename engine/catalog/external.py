"""An external tensor's side of the catalog: its location checked against this database's roots at every
use, its statistics taken when it is registered, its tiles read whole (for the buffer pool) or by partition."""
from __future__ import annotations

import os
from dataclasses import replace
from typing import Iterator, Optional, Sequence

from trdb.storage import external_reads, file_sandbox
from trdb.storage.database import Database
from trdb.storage.external_location import Location, locate, normalized, parse_roots
from trdb.storage.external_tensors import list_dataset, open_parquet, value_column
from trdb.storage.tensor_meta import TensorMeta


def roots(db: Database) -> list[str]:
    """The allowed roots: the `external_roots` setting, else the database file's directory (none in memory)."""
    given = parse_roots(db.file.shared_settings.get("external_roots", ""))
    if given:
        return given
    return [os.path.dirname(os.path.abspath(db.file.path))] if db.file.path else []


def location_of(db: Database, uri: str) -> Location:
    """The checked location (roots, and DuckDB's own file access settings for a local path)."""
    location = replace(locate(uri, roots(db), db.file.shared_settings.get("s3_endpoint", "")),
                       sandbox=file_sandbox.sandbox(db))  # each file opened is checked with it, on any worker
    if location.scheme == "file":
        location.sandbox.resolved(location.path)
    else:
        location.opened(location.path)
    return location


def registered(db: Database, meta: TensorMeta, uri: str) -> TensorMeta:
    """The metadata of a new external tensor at `uri`: value column from the dataset, statistics from one
    checking pass over every tile (so a malformed dataset is refused before the catalog names it)."""
    location = location_of(db, uri)
    dataset = list_dataset(location)
    with open_parquet(location, dataset.files[0]) as first:
        value = value_column(location, first.schema_arrow, meta.value_name, scalar=meta.tile == ())
    meta = replace(meta, value_name=value, location=normalized(uri), table="")
    return meta.with_stats(*external_reads.statistics(location, meta))


def whole_key(db: Database, meta: TensorMeta) -> tuple[tuple[str, int], object]:
    """The buffer pool's key of the dataset as its files are now, and the listing (rewritten files: a new key)."""
    dataset = list_dataset(location_of(db, meta.location))
    return (f"external:{meta.location}#{dataset.fingerprint}", meta.version), dataset


def partition_reads(db: Database, meta: TensorMeta, partition: int, partitions: int,
                    columns: Optional[Sequence[int]], read_bytes: int) -> Iterator[tuple]:
    return external_reads.read_partition(location_of(db, meta.location), meta, partition, partitions,
                                         columns, read_bytes)
