"""External tensors: tiles in a Parquet dataset outside the database, read through pyarrow, never written.

The dataset is what `COPY ... TO ... (FORMAT parquet)` writes: one row per tile, the key columns
(integers), the tile as Arrow's `fixed_shape_tensor` of the nominal tile shape and, where edge tiles
are smaller, `<value>_shape`. It is one file, or a directory of such files; with `PARTITIONS n` the
directory holds `part=<p>/` folders (Hive-style), each with the tiles whose key hash (storage.key_hash,
the hash exchanges route by) modulo n is p, and every file says n in its metadata. A reader of one
partition of m, where m divides n, opens only the folders p + m*k; otherwise every file, keeping the
rows that hash to it. Each read checks what it reads (schema, tile shape and dtype, keys inside the
grid and in their partition, no key twice); a tile the dataset holds is present whatever its values
(zeros are values).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from trdb.errors import DataError, NotSupportedError, OperationalError
from trdb.storage.external_location import Location
from trdb.storage.tensor_meta import TensorMeta

PARTITIONS_KEY = b"trdb.partitions"
PARTITION_FOLDER = re.compile(r"part=([0-9]{1,9})")
SUFFIXES = (".parquet", ".parq", ".pq")
_WRITE_HINT = "COPY (query) TO 'dir' (FORMAT parquet, PARTITIONS n) writes a dataset in tile form"


@dataclass(frozen=True)
class Dataset:
    """The files of an external tensor's dataset as listed now: their paths and the partition of each."""

    location: Location
    files: tuple[str, ...]
    parts: tuple[Optional[int], ...]   # each file's partition; None: the dataset is not partitioned
    fingerprint: str                   # changes when a file is added, removed or rewritten

    def chosen(self, partition: int, partitions: int, hashed_all_keys: bool, count: int) -> list[int]:
        """The files a reader of `partition` of `partitions` opens: its own folders when the dataset's
        partitioning refines the reader's, else every file."""
        if partitions <= 1 or not hashed_all_keys or self.parts[:1] == (None,) or count % partitions:
            return list(range(len(self.files)))
        return [f for f, part in enumerate(self.parts) if part % partitions == partition]


def refuse_write(meta: TensorMeta) -> None:
    """Writes to an external tensor are refused: its files lie outside the database's transactions."""
    if meta.external:
        raise NotSupportedError(f'tensor "{meta.name}" is external (LOCATION \'{meta.location}\'): trdb reads it '
                                "and does not write it",
                                hint=f"CREATE TENSOR {meta.name}_copy AS SELECT * FROM {meta.name} copies it into the "
                                     f"database; COPY (query) TO 'dir' (PARTITIONS n) writes a new dataset")


def list_dataset(location: Location) -> Dataset:
    """The dataset's Parquet files (hidden ones, '.' or '_' first, left out), in a stable order."""
    fs = location.filesystem()
    info = guarded(location, lambda: fs.get_file_info(location.path))
    if info.type == pafs.FileType.NotFound:
        raise OperationalError(f"no Parquet dataset at '{location.uri}'",
                               hint="write one with COPY X TO 'dir' (FORMAT parquet, PARTITIONS n)")
    if info.type == pafs.FileType.File:
        infos = [info]
    else:
        selector = pafs.FileSelector(location.path, recursive=True)
        infos = sorted((i for i in guarded(location, lambda: fs.get_file_info(selector))
                        if i.type == pafs.FileType.File and _visible(location.path, i.path)), key=lambda i: i.path)
    if not infos:
        raise DataError(f"the dataset at '{location.uri}' holds no Parquet file", hint=_WRITE_HINT)
    parts = tuple(_partition_of(location, i.path) for i in infos)
    if len({p is None for p in parts}) > 1:
        raise DataError(f"the dataset at '{location.uri}' mixes files in part=<p> folders with other files")
    digest = hashlib.sha256(repr([(i.path, i.size, i.mtime_ns) for i in infos]).encode()).hexdigest()[:24]
    return Dataset(location, tuple(i.path for i in infos), parts, digest)


def _visible(root: str, path: str) -> bool:
    relative = path[len(root):].strip("/").split("/")
    return path.lower().endswith(SUFFIXES) and not any(p.startswith((".", "_")) for p in relative)


def _partition_of(location: Location, path: str) -> Optional[int]:
    folder = path.rsplit("/", 2)[-2] if path.count("/") >= 1 else ""
    found = PARTITION_FOLDER.fullmatch(folder) if path.startswith(location.path + "/") else None
    return int(found.group(1)) if found else None


def guarded(location: Location, call):
    """A pyarrow filesystem call; what goes wrong there (a server that does not answer, no permission) is
    an OperationalError naming the location."""
    try:
        return call()
    except pa.ArrowInvalid as exc:  # a file that is not Parquet, or damaged
        raise DataError(f"the dataset at '{location.uri}' is malformed: {str(exc).splitlines()[0][:300]}",
                        hint=_WRITE_HINT) from None
    except (OSError, pa.ArrowException) as exc:
        hint = ("check the s3_endpoint setting and the credentials in the environment or ~/.aws"
                if location.scheme == "s3" else None)
        raise OperationalError(f"cannot read '{location.uri}': {str(exc).splitlines()[0][:300]}", hint=hint) from None


# ------------------------------------------------------------ schema

def open_parquet(location: Location, path: str) -> pq.ParquetFile:
    """A file of the dataset, opened where it resolves to once that is checked (the one way a dataset's file opens)."""
    opened = location.opened(path)
    return guarded(location, lambda: pq.ParquetFile(location.filesystem().open_input_file(opened)))


def value_column(location: Location, schema: pa.Schema, name: str, scalar: bool = False) -> str:
    """The tile column: `name` if the dataset has it, else its one fixed_shape_tensor column (a 0-d tensor's
    tiles, `scalar`, are a plain column, as COPY writes them)."""
    tiles = [f.name for f in schema if isinstance(f.type, pa.FixedShapeTensorType)]
    if name in tiles or (scalar and name in schema.names):
        return name
    if len(tiles) != 1:
        raise DataError(f"the dataset at '{location.uri}' is not in tile form: it has "
                        f"{'no' if not tiles else len(tiles)} fixed_shape_tensor columns "
                        f"({', '.join(schema.names)})", hint=_WRITE_HINT)
    return tiles[0]


def check_schema(location: Location, path: str, schema: pa.Schema, meta: TensorMeta) -> Optional[str]:
    """A file's columns against the tensor's declaration; the name of its edge-shape column, if any."""
    where = location.describe(path)
    for key in meta.keys:
        if key not in schema.names or not pa.types.is_integer(schema.field(key).type):
            raise DataError(f"'{where}' has no integer key column {key!r} (it has {', '.join(schema.names)})",
                            hint="name the dataset's key columns in CREATE TENSOR X (key, ...) ... LOCATION")
    field = schema.field(meta.value_name) if meta.value_name in schema.names else None
    tensor = field is not None and isinstance(field.type, pa.FixedShapeTensorType)
    if field is None or not (tensor or (meta.tile == () and pa.types.is_primitive(field.type))):
        raise DataError(f"'{where}' has no fixed_shape_tensor column {meta.value_name!r}", hint=_WRITE_HINT)
    value_type = field.type.value_type if tensor else field.type
    dtype, shape = value_type.to_pandas_dtype(), tuple(field.type.shape) if tensor else ()
    if np.dtype(dtype) != meta.dtype or shape != tuple(meta.tile):
        raise DataError(f"'{where}' holds {np.dtype(dtype).name} tiles of shape {shape}; {meta.name} is declared "
                        f"{meta.dtype.name} with TILE {tuple(meta.tile)}",
                        hint="declare the dataset's DTYPE and TILE in CREATE TENSOR ... LOCATION")
    extra = f"{meta.value_name}_shape"
    return extra if extra in schema.names else None


def declared_partitions(location: Location, path: str, schema: pa.Schema, dataset: Dataset) -> int:
    """The partition count a file of a partitioned dataset states (1 for a dataset without partitions)."""
    text = (schema.metadata or {}).get(PARTITIONS_KEY)
    if dataset.parts[0] is None:
        return 1
    count = int(text) if text and text.isdigit() else 0
    if count < 1 or max(dataset.parts) >= count:
        raise DataError(f"'{location.describe(path)}' does not state a partition count that covers its "
                        f"part=<p> folders", hint=_WRITE_HINT)
    return count
