"""Inside a Ray actor: the tensor partitions it keeps across statements, and the scan that reads them.

A partition is named by `PartitionKey`: the database, the tile table, its data version (every write
takes a new one, so a key names one content for ever), and which hash partition of which key columns
it is. The driver decides what each actor keeps and what it drops (`residency.py` mirrors this
store), so the store only does as told; a scan whose partition is missing fails as a broken
invariant (the driver ships, or has the actor load, every partition before the fragment runs).
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Iterator, NamedTuple, Optional

from trdb.errors import InternalError
from trdb.execution.exchange.channel import batch_bytes
from trdb.execution.operators.list_scan import bounded_batches
from trdb.execution.operators.operator import Batch, PhysicalOperator
from trdb.execution.ray.actor.disk_cache import DiskCache
from trdb.execution.ray.deltas import Items, patched
from trdb.storage.external_location import Location
from trdb.storage.external_reads import read_partition
from trdb.storage.tensor_meta import TensorMeta


class PartitionKey(NamedTuple):
    """One hash partition of one version of a stored tensor."""

    database: str
    table: str
    version: int
    partition: int
    partitions: int
    columns: tuple[int, ...]


def _own(value, copy: bool):
    """A tile read-only as scanned tiles are: copied out of the object store into the actor's heap
    (`copy`), or as it is (a tile the actor read itself is its own already)."""
    if copy and hasattr(value, "copy"):
        value = value.copy()
    if hasattr(value, "flags"):
        value.flags.writeable = False
    return value


class ResidentStore:
    """The partitions this actor process keeps: rows by key, with their bytes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: OrderedDict[PartitionKey, tuple[list, int]] = OrderedDict()
        self.disk = DiskCache()

    def keep(self, key: PartitionKey, rows: list, drop: tuple = (), spill: tuple = (), copy: bool = True) -> int:
        """Keep `rows` under `key`, after dropping `drop` (from memory and disk) and moving `spill` to disk;
        `copy`: rows that are views of the object store (shipped by the driver) are copied so that its
        copy can go."""
        return self._put(key, [tuple(_own(v, copy) for v in row) for row in rows], drop, spill)

    def patch(self, key: PartitionKey, base: PartitionKey, items: Items, drop: tuple = (), spill: tuple = ()) -> int:
        """Keep under `key` the partition `items` describe: changed rows (copied), the others `base`'s."""
        owned = [(k, None if row is None else tuple(_own(v, True) for v in row)) for k, row in items]
        return self._put(key, patched(self.find(base), owned), drop, spill)

    def restore(self, key: PartitionKey, drop: tuple = (), spill: tuple = ()) -> int:
        """Read `key` back from disk into memory (making room as the driver says); its bytes."""
        self._evict(drop, spill)
        return self._put(key, self.disk.read(_file_name(key)), (), ())

    def _put(self, key: PartitionKey, owned: list, drop: tuple, spill: tuple) -> int:
        self._evict(drop, spill)
        size = batch_bytes(owned) if owned else 0
        with self._lock:
            self._rows[key] = (owned, size)
        return size

    def _evict(self, drop: tuple, spill: tuple) -> None:
        for key in spill:
            with self._lock:
                entry = self._rows.pop(key, None)
            if entry is not None:
                self.disk.write(_file_name(key), entry[0])
        for key in drop:
            with self._lock:
                self._rows.pop(key, None)
            self.disk.delete(_file_name(key))

    def rows(self, key: PartitionKey) -> list:
        with self._lock:
            entry = self._rows.get(key)
        if entry is None:
            raise InternalError(f"the Ray worker does not hold partition {key.partition} of {key.table} "
                                f"version {key.version}, which the driver placed there")
        return entry[0]

    def find(self, key: PartitionKey) -> Optional[list]:
        with self._lock:
            entry = self._rows.get(key)
        return None if entry is None else entry[0]

    def drop(self, keys: tuple) -> None:
        self._evict(keys, ())

    def held(self) -> dict:
        """What is kept: the bytes of each key (for tests and statistics)."""
        with self._lock:
            return {key: size for key, (_, size) in self._rows.items()}


STORE = ResidentStore()  # one per process: a Ray actor is a process


def _file_name(key: PartitionKey) -> str:
    """The cache file of a partition, named by a digest of its whole key (one name, one content; an
    external tensor's table is a URI, which is no file name)."""
    return hashlib.sha256(repr(tuple(key)).encode()).hexdigest()[:32] + ".arrow"


def external_partition(location: Location, meta: TensorMeta, partition: int, partitions: int,
                       columns: tuple[int, ...]) -> list:
    """An external tensor's partition read where this runs (an actor, from storage its node can read)."""
    rows: list = []
    for keys, tiles in read_partition(location, meta, partition, partitions, columns or None):
        rows.extend(tuple(k) + (t,) for k, t in zip(keys.tolist(), tiles))
    return rows


class ResidentScanExec(PhysicalOperator):
    """Stands in (in a shipped fragment) for a tensor scan: its partition is kept in the actor (the
    driver has shipped it, or had the actor load it, before the fragment runs)."""

    reads_tiles = True

    def __init__(self, key: PartitionKey):
        super().__init__()
        self.key = key
        self._stream: Optional[Iterator[Batch]] = None

    def _open(self) -> None:
        rows = STORE.rows(self.key)
        asarray = self.ctx.backend.asarray
        if self.ctx.backend.name != "numpy":
            rows = [tuple(asarray(v) if hasattr(v, "__array__") else v for v in row) for row in rows]
        self._stream = bounded_batches(rows)

    def _next(self) -> Optional[Batch]:
        return next(self._stream, None)

    def _close(self) -> None:
        self._stream = None
