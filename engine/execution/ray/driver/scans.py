"""On the driver: one execution's scans of stored tensors, turned into scans of partitions kept in actors.

A tensor scan's partition runs in the actor that runs its partition's operators (worker =
partition mod workers, the same in every statement at the same worker count), reading the copy that
actor keeps. The first statement that needs a partition (or a new version of it: a write) reads it
on the driver and ships it; later ones ship nothing. An external tensor's partition is read by the
actor itself, from the files every node can read: the driver sends the location (checked) only.
A partition larger than the per-actor budget, and every other scan (of a shared subplan's rows, of
an ordinary table), is read on the driver and fed to its fragment batch by batch, every time.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, Optional

import ray

from trdb.catalog.external import location_of, whole_key
from trdb.execution.exchange.channel import batch_bytes
from trdb.execution.interpreter import operator_for
from trdb.execution.operators.operator import ExecContext
from trdb.execution.operators.tensor_scan import TensorScanExec
from trdb.execution.ray.actor.resident import PartitionKey, ResidentScanExec, external_partition
from trdb.execution.ray.deltas import changes, digests_of
from trdb.execution.ray.driver.residency import RESIDENCY, Eviction, Shipped, resident_key
from trdb.execution.ray.kept_subplans import PLACEMENTS, SharedScanExec
from trdb.plan.physical import PhysicalNode
from trdb.plan.physical_operators import RowsScan, TensorScan
from trdb.storage.tile_store import estimated_size

DIGESTING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trdb-digests")


class ResidentScans:
    """The resident scans of one execution: the partitions it pinned, what each fragment waits for."""

    def __init__(self, actors: list, leaf_ctx: ExecContext, budget: int, shipped: Shipped, disk_budget: int = 0):
        self.actors, self.leaf_ctx, self.budget, self.shipped = actors, leaf_ctx, budget, shipped
        self.disk_budget = disk_budget
        self.ready: list[list[Any]] = [[] for _ in actors]   # per worker: the keeps its fragments wait for
        self._pinned: list[tuple[Any, PartitionKey]] = []

    def scan(self, node: PhysicalNode, partition: int, worker: int, whole: bool = False) -> Optional[ResidentScanExec]:
        """The operator reading `node`'s partition `partition` (`whole`: all its partitions, as a broadcast
        of them gives each consumer) kept in actor `worker`, or None: fed instead."""
        spec = node.spec
        if isinstance(spec, RowsScan):
            return self._shared(spec, partition, whole)
        if not isinstance(spec, TensorScan) or self.budget <= 0 or self.leaf_ctx.catalog is None:
            return None
        meta = self._current(spec.tensor)
        parts = 1 if whole else max(1, spec.partitions)
        size = estimated_size(meta) // parts if meta is not None else self.budget + 1
        if size > self.budget:
            return None
        partition = partition if parts > 1 else 0
        columns = spec.columns if parts > 1 else ()
        actor = self.actors[worker]
        if meta.external:  # the actor reads its own partition of the files; the driver lists them only
            (table, version), _ = whole_key(self.leaf_ctx.catalog.db, meta)
            key = resident_key(self.leaf_ctx.catalog.pool, table, version, partition, parts, columns)
            source = partial(external_partition, location_of(self.leaf_ctx.catalog.db, meta.location), meta,
                             partition, parts, columns)
            ship = lambda eviction, base: self._load(actor, key, source, eviction)  # noqa: E731
        else:
            key = resident_key(self.leaf_ctx.catalog.pool, meta.table, meta.version, partition, parts, columns)
            ship = lambda eviction, base: self._ship(node, partition, actor, key, eviction, base)  # noqa: E731
        restore = lambda eviction: actor.restore.remote(key, eviction.drop, eviction.spill)  # noqa: E731
        ready, shipped = RESIDENCY.acquire(actor, key, size, self.budget, ship, self.disk_budget, restore)
        self._pinned.append((actor, key))
        self.ready[worker].append(ready)
        if not shipped:
            self.shipped.add(reused=1)
        elif self.disk_budget:
            self._drop_older_on_disk(key)
        return ResidentScanExec(key)

    def _drop_older_on_disk(self, key: PartitionKey) -> None:
        """A new version was shipped: the other actors drop the tensor's older versions from their disks."""
        stale = RESIDENCY.older_on_disk(key)
        for actor in self.actors:
            keys = stale.get(actor._actor_id.hex())
            if keys:
                actor.drop.remote(keys)

    def _shared(self, spec: RowsScan, partition: int, whole: bool) -> Optional[SharedScanExec]:
        """A scan of a shared subplan's tuples that its producers' actors keep, read there (else None: fed)."""
        placement = PLACEMENTS.get(spec.rows, {actor._actor_id.hex() for actor in self.actors})
        if placement is None:
            return None
        partitions = 1 if whole else max(1, spec.partitions)
        columns = spec.columns if partitions > 1 else ()
        partition = partition if partitions > 1 else 0
        return SharedScanExec(placement.sources_for(partition, partitions, columns), partition, partitions, columns)

    def _current(self, planned: Any) -> Optional[Any]:
        """The tensor's metadata now: a cached plan (MINIMIZE's steps, a repeated statement) names the
        data version it was planned at, and writes since then took new ones. None: not the same table."""
        try:
            meta = self.leaf_ctx.catalog.tensor(planned.name)
        except Exception:  # a damaged tensor: the scan on the driver reports it as usual
            return None
        return meta if meta is not None and meta.table == planned.table else None

    def _ship(self, node: PhysicalNode, partition: int, actor: Any, key: PartitionKey, eviction: Eviction,
              base: Optional[tuple]) -> tuple[Any, Future]:
        """Read the partition here (through the buffer pool) and send it to the actor to keep: whole, or
        where it keeps another version (`base`: its key, digests and reference), the tiles that changed."""
        scan = operator_for(node, [], partition) if key.partitions > 1 else TensorScanExec(node.spec.tensor)
        rows: list = []
        scan.open(self.leaf_ctx)
        try:
            while (batch := scan.next_batch()) is not None:
                rows.extend(batch)
        finally:
            scan.close()
        if base is None:
            self.shipped.add(batch_bytes(rows) if rows else 0, kept=1)
            # digested beside the statement (hashlib lets go of the GIL): only a later write's shipping waits
            return actor.keep.remote(key, rows, eviction.drop, eviction.spill), DIGESTING.submit(digests_of, rows)
        base_key, base_digests, base_ready = base
        self._pinned.append((actor, base_key))  # acquire pinned it: it stays until the actor has built this
        digests = digests_of(rows)
        items, changed = changes(rows, digests, base_digests.result())
        self.shipped.add(batch_bytes(changed) if changed else 0, kept=1)
        done: Future = Future()
        done.set_result(digests)
        return actor.patch.remote(key, base_key, items, eviction.drop, base_ready, eviction.spill), done

    def _load(self, actor: Any, key: PartitionKey, source, eviction: Eviction) -> tuple[Any, None]:
        """Have the actor read the partition itself and keep it (nothing but the reading function is sent)."""
        self.shipped.add(0, kept=1)
        return actor.load.remote(key, source, eviction.drop, eviction.spill), None

    def release(self, failed: bool = False) -> None:
        """The execution has ended: its partitions may be dropped to make room from now on. After a failed
        one, those an actor failed to keep are forgotten (the next statement ships them again)."""
        pinned, self._pinned = self._pinned, []
        for actor, key in pinned:
            RESIDENCY.release(actor, key)
            if failed and _failed(RESIDENCY.ready(actor, key)):
                RESIDENCY.forget(actor, key)


def _failed(ready: Any) -> bool:
    """Whether a keep (its reference) has ended with an error (worker.py `_outcome`)."""
    if ready is None:
        return False
    done, _ = ray.wait([ready], timeout=0)
    return bool(done) and isinstance(ray.get(done[0]), BaseException)
