"""A shared subplan's tuples kept on the actors that computed them, read there by the plans that use them.

A shared subplan (MINIMIZE's forward pass, a view read twice) runs once; its tuples go to the
driver, which plans the rest of the statement with them. On Ray each producer fragment of that
run also keeps its output in its actor (`RayWorker.run(keep=...)`, under a key of the run and the
producer), so a later scan of those tuples runs in the actor of its partition and takes its part
from each producer's copy: the one in its own actor directly, the others from their actors
(`RayWorker.part`, node to node), never through the driver. The copies live as long as the
driver's tuples (the spool, within a statement or a MINIMIZE step, or carried to the next
statement): when the spool goes, the actors drop them. A run whose tuples could not all be kept
(a producer on the driver, a partition past `ray_resident_bytes`) is read from the driver as before.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any, Optional

import ray

from trdb.errors import InternalError
from trdb.execution.exchange.partitioning import partition_of
from trdb.execution.operators.list_scan import bounded_batches
from trdb.execution.operators.operator import PhysicalOperator
from trdb.execution.ray.actor import resident
from trdb.execution.ray.actor.resident import PartitionKey
from trdb.plan.physical import Partitioning, PhysicalNode

SHARED_DATABASE = "shared"  # the PartitionKey database of kept shared tuples; the table is the run's id


def kept_key(execution_id: str, producer: int, producers: int) -> PartitionKey:
    return PartitionKey(SHARED_DATABASE, execution_id, 0, producer, producers, ())


@dataclass(frozen=True)
class Placement:
    """Where a run's tuples are kept: per producer partition, its actor and key; how they are spread."""

    sources: tuple[tuple[Any, PartitionKey], ...]
    partitioning: Partitioning

    def sources_for(self, partition: int, partitions: int, columns: tuple[int, ...]) -> tuple:
        """The copies holding the tuples of `partition` of `partitions` hashed on `columns`: all of them,
        or one where the run's own partitioning is that one."""
        ours = self.partitioning
        if partitions > 1 and ours.kind == "hash" and (ours.count, ours.columns) == (partitions, columns):
            return tuple(s for s in self.sources if s[1].partition == partition)
        return self.sources


class Placements:
    """On the driver: the placement of each spool of shared tuples, dropped in the actors with it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_rows: "weakref.WeakKeyDictionary[Any, Placement]" = weakref.WeakKeyDictionary()

    def register(self, rows: Any, placement: Placement) -> None:
        with self._lock:
            self._by_rows[rows] = placement
        weakref.finalize(rows, drop, placement.sources)

    def get(self, rows: Any, live: set[str]) -> Optional[Placement]:
        """The placement of `rows`, if every actor holding a part of it is among `live` (actor ids)."""
        try:
            with self._lock:
                placement = self._by_rows.get(rows)
        except TypeError:  # a plain list: not a spool, never kept
            return None
        if placement is None or any(actor._actor_id.hex() not in live for actor, _ in placement.sources):
            return None
        return placement


PLACEMENTS = Placements()


class KeptOutput:
    """On the driver: the copies the producers of one run (a shared subplan's) keep of its output."""

    def __init__(self, execution_id: str, producer: PhysicalNode, limit: int):
        self.execution_id, self.partitioning, self.limit = execution_id, producer.partitioning, limit
        self.producers = producer.instances
        self._lock = threading.Lock()
        self._sources: dict[int, tuple[Any, PartitionKey]] = {}
        self._kept: dict[int, bool] = {}

    def key(self, producer: int, actor: Any) -> Optional[PartitionKey]:
        """The key producer `producer`'s actor keeps its output under (None: nothing is kept)."""
        if self.limit <= 0:
            return None
        key = kept_key(self.execution_id, producer, self.producers)
        with self._lock:
            self._sources[producer] = (actor, key)
        return key

    def done(self, key: PartitionKey, kept: bool) -> None:
        with self._lock:
            self._kept[key.partition] = kept

    def attach(self, rows: Any) -> None:
        """The run succeeded and its tuples are `rows`: the copies stay while it lives, if all were kept."""
        with self._lock:
            complete = len(self._sources) == self.producers and all(self._kept.get(p) for p in self._sources)
            sources = tuple(self._sources[p] for p in sorted(self._sources))
        if complete:
            PLACEMENTS.register(rows, Placement(sources, self.partitioning))
        else:
            self.discard()

    def discard(self) -> None:
        """The run failed, or not all of its output was kept: the actors drop what they kept."""
        with self._lock:
            sources, self._sources = tuple(self._sources.values()), {}
        drop(sources)


def drop(sources) -> None:
    """Have each actor forget its copy (it may be gone already, or Ray shut down: then nothing is kept)."""
    if not ray.is_initialized():
        return  # a call now would start a new local Ray
    for actor, key in sources:
        try:
            actor.drop.remote((key,))
        except Exception:
            pass


def part(key: PartitionKey, partition: int, partitions: int, columns: tuple[int, ...]) -> list:
    """In the actor keeping `key`: those of its tuples that hash to `partition`."""
    rows = resident.STORE.find(key)
    if rows is None:
        raise InternalError(f"the Ray worker does not hold the shared tuples {key.table}/{key.partition}")
    if partitions <= 1:
        return rows
    return [r for r in rows if partition_of(tuple(r[c] for c in columns), partitions) == partition]


class SharedScanExec(PhysicalOperator):
    """Stands in (in a shipped fragment) for a scan of shared tuples: reads its part of every kept copy."""

    reads_tiles = True

    def __init__(self, sources: tuple, partition: int, partitions: int, columns: tuple[int, ...]):
        super().__init__()
        self.sources, self.partition, self.partitions, self.columns = sources, partition, partitions, columns
        self._stream = None

    def _open(self) -> None:
        wanted = (self.partition, self.partitions, self.columns)
        # the copies in other actors are asked for at once; the parts are taken in the sources' order
        parts = [part(key, *wanted) if resident.STORE.find(key) is not None else actor.part.remote(key, *wanted)
                 for actor, key in self.sources]
        fetched = iter(ray.get([p for p in parts if isinstance(p, ray.ObjectRef)]))
        rows = [row for p in parts for row in (next(fetched) if isinstance(p, ray.ObjectRef) else p)]
        if self.ctx.backend.name != "numpy":
            asarray = self.ctx.backend.asarray
            rows = [tuple(asarray(v) if hasattr(v, "__array__") else v for v in row) for row in rows]
        self._stream = bounded_batches(rows)

    def _next(self):
        return next(self._stream, None)

    def _close(self) -> None:
        self._stream = None
