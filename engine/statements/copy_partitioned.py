"""COPY ... TO 'dir' (FORMAT parquet, PARTITIONS n): a tile-form Parquet dataset hash-partitioned by key.

The directory holds `part=<p>/data.parquet` for p in 0..n-1 (every one, empty or not, so the dataset
says its own partition count), each with the tiles whose key hash modulo n is p, and n in every
file's metadata: the layout external tensors (CREATE TENSOR ... LOCATION) read, where a worker
opens only its own partitions. It is written into a hidden directory beside the target and put in
place when complete; an existing dataset there is replaced, any other directory refused.
"""
from __future__ import annotations

import os
import shutil
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from trdb.errors import OperationalError
from trdb.kernels.distinct import distinct
from trdb.statements.context import StatementContext
from trdb.storage import file_sandbox
from trdb.storage.external_tensors import PARTITION_FOLDER, PARTITIONS_KEY
from trdb.storage.key_hash import key_hash_array

MAX_PARTITIONS = 1024  # one open file each while the dataset is written
FILE = "data.parquet"


def partition_count(sc: StatementContext, node, text: str) -> int:
    if not str(text).isdigit() or not 1 <= int(text) <= MAX_PARTITIONS:
        raise sc.bind.fail(node, f"COPY option PARTITIONS takes a count from 1 to {MAX_PARTITIONS}, not {text!r}")
    return int(text)


def check_folder(sc: StatementContext, node, path: str) -> str:
    """The target directory: local, allowed, its parent there, and not a directory of something else."""
    if not path or "\x00" in path or "://" in path:
        raise sc.bind.fail(node, f"COPY ... PARTITIONS writes a local directory, not {path!r}", error=OperationalError)
    try:  # the directory resolved (links followed): the files are written under what was checked
        path = file_sandbox.checked(sc.db, path)
    except OperationalError as exc:
        raise sc.bind.fail(node, exc.message, hint=exc.hint, error=OperationalError) from None
    if not os.path.isdir(os.path.dirname(path)):
        raise sc.bind.fail(node, f"cannot write '{path}': no such directory '{os.path.dirname(path)}'",
                           error=OperationalError)
    if os.path.exists(path) and not _is_dataset(path):
        raise sc.bind.fail(node, f"cannot write the dataset to '{path}': it exists and is not a partitioned "
                                 "dataset COPY wrote", hint="name a new directory", error=OperationalError)
    return path


def _is_dataset(path: str) -> bool:
    if not os.path.isdir(path):
        return False
    return all(PARTITION_FOLDER.fullmatch(n) or n.startswith((".", "_")) for n in os.listdir(path))


def write_dataset(path: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch], key_names: list[str],
                  count: int) -> int:
    """Write the batches' tiles to `path`, each into its partition's file; the rows written."""
    temporary = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.trdb-{os.getpid()}.tmp")
    shutil.rmtree(temporary, ignore_errors=True)
    try:
        written = _write(temporary, schema.with_metadata({PARTITIONS_KEY: str(count).encode()}), batches,
                         key_names, count)
        _put_in_place(temporary, path)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return written


def _write(folder: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch], key_names: list[str],
           count: int) -> int:
    writers = []
    try:
        for part in range(count):
            os.makedirs(os.path.join(folder, f"part={part}"))
            writers.append(pq.ParquetWriter(os.path.join(folder, f"part={part}", FILE), schema))
        written = 0
        for batch in batches:
            keys = np.stack([batch.column(n).to_numpy() for n in key_names], axis=1) if key_names else \
                np.zeros((batch.num_rows, 0), dtype=np.int64)
            owners = key_hash_array(keys) % count
            for part in distinct(owners).tolist():
                writers[part].write_batch(batch.take(pa.array(np.flatnonzero(owners == part))))
            written += batch.num_rows
        return written
    finally:
        for writer in writers:
            writer.close()


def _put_in_place(temporary: str, path: str) -> None:
    """The new dataset replaces the old one (two renames: a reader in between finds no dataset, never half of one)."""
    old = temporary + ".old"
    if os.path.exists(path):
        os.rename(path, old)
    os.rename(temporary, path)
    shutil.rmtree(old, ignore_errors=True)
