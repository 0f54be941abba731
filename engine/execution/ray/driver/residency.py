"""On the driver: which tensor partitions each actor keeps, what to ship to it, and the bytes that costs.

An actor keeps the partitions its scans read (`resident.py`), up to `ray_resident_bytes` each,
least recently used dropped first. This registry mirrors every actor's store exactly (the driver
alone tells an actor what to keep and to drop), so deciding what to ship costs no call. A partition
in use by a running statement is pinned: it is never dropped under it. A key names one content of a
tensor for ever, so a write needs no invalidation: the next statement asks for the new version's
key, ships it, and the old one ages out. A new actor (one replacing a dead one, or on a node added
later) has a new id and so starts empty.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any, Callable, NamedTuple, Optional

from trdb.execution.ray.actor.resident import PartitionKey

_DATABASES: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
_DATABASES_LOCK = threading.Lock()


def database_id(pool: Any) -> str:
    """A name for one open database (its buffer pool is shared by all its connections) unique in this process."""
    import uuid

    with _DATABASES_LOCK:
        name = _DATABASES.get(pool)
        if name is None:
            name = _DATABASES[pool] = uuid.uuid4().hex
        return name


class Shipped:
    """Bytes the driver sent to actors, and partitions kept or reused: per execution and for the process."""

    def __init__(self, total: Optional["Shipped"] = None) -> None:
        self._lock = threading.Lock()
        self._total = total  # counted there too (the process's totals)
        self.bytes = 0       # tiles sent: partitions to keep, and scans fed to a fragment
        self.tensors = 0     # ... of them, those of stored tensors (the rest: computed tuples, e.g. shared subplans')
        self.kept = 0        # partitions shipped to be kept
        self.reused = 0      # partitions a statement found kept already
        self.fed = 0         # scans fed batch by batch (not kept: too large, or not a stored tensor)

    def add(self, size: int = 0, kept: int = 0, reused: int = 0, fed: int = 0, stored: bool = True) -> None:
        with self._lock:
            self.bytes += size
            self.tensors += size if stored else 0
            self.kept += kept
            self.reused += reused
            self.fed += fed
        if self._total is not None:
            self._total.add(size, kept, reused, fed, stored)

    def as_dict(self) -> dict:
        return {"bytes_sent": self.bytes, "tensor_bytes_sent": self.tensors, "partitions_shipped": self.kept,
                "partitions_reused": self.reused, "scans_fed": self.fed}


TOTAL = Shipped()  # since the process started: what `ray_statistics()` reports


class _Entry:
    __slots__ = ("size", "ready", "pins", "digests", "on_disk", "from_disk")

    def __init__(self, size: int):
        self.size, self.ready, self.pins, self.on_disk = size, None, 0, False
        self.from_disk = False  # read back from the actor's disk (its `ready` fails if the file was gone)
        self.digests: Optional[Any] = None  # a future of the digest per tile key of what was shipped (None: read
        # by the actor itself)


class Eviction(NamedTuple):
    """What an actor does before it keeps one more partition: keys to drop (from memory and disk), and
    keys to move from memory to its node's disk."""

    drop: tuple = ()
    spill: tuple = ()


Ship = Callable[[Eviction, Optional[tuple]], tuple[Any, Any]]


class Residency:
    """What each actor (by actor id) keeps: partition keys in least recently used order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, OrderedDict[PartitionKey, _Entry]] = {}
        self._newest: dict[tuple, int] = {}  # the newest version of each (database, table) acquired

    def forget_actors_except(self, live: set[str]) -> None:
        """Actors that are gone (dead, replaced, or of an earlier connection to Ray) keep nothing."""
        with self._lock:
            for actor in [a for a in self._held if a not in live]:
                del self._held[actor]

    def acquire(self, actor: Any, key: PartitionKey, size: int, budget: int, ship: Ship,
                disk_budget: int = 0, restore: Optional[Callable[[Eviction], Any]] = None) -> tuple[Any, bool]:
        """Pin `key` in `actor` for a statement: (a reference that is ready once the actor has it in memory,
        whether it was shipped now). `ship(eviction, base)` sends it, after the actor evicts as told to
        make room, and gives (that reference, a future of its tiles' digests or None); `base` is (key,
        digests, reference) of another version of the same partition the actor keeps (pinned now, for the
        caller to `release`), which the actor may build it from. A partition the actor moved to disk is
        read back by `restore(eviction)` instead: nothing is shipped. Up to `disk_budget` bytes of what
        no longer fits `budget` go to the actor's disk instead of being dropped."""
        actor_id = actor._actor_id.hex()
        with self._lock:
            if key.version > self._newest.get(key[:2], -1):
                self._newest[key[:2]] = key.version
            held = self._held.setdefault(actor_id, OrderedDict())
            entry = held.get(key)
            if entry is not None and not (entry.on_disk and restore is None):
                held.move_to_end(key)
                entry.pins += 1
                if entry.on_disk:
                    entry.on_disk, entry.from_disk = False, True
                    entry.ready = restore(self._room(held, key, budget, disk_budget, self._newest))
                return entry.ready, False
            stale = self._versions_on_disk(held, key)
            base = self._base(held, key)
            if base is not None:
                held[base].pins += 1
            entry = held[key] = _Entry(size)
            entry.pins += 1
            room = self._room(held, key, budget, disk_budget, self._newest)
            eviction = Eviction(room.drop + stale, room.spill)
            entry.ready, entry.digests = ship(eviction, None if base is None else (base, held[base].digests,
                                                                                   held[base].ready))
            return entry.ready, True

    @staticmethod
    def _base(held: OrderedDict, key: PartitionKey) -> Optional[PartitionKey]:
        """The most recently used other version of `key`'s partition that was shipped with digests (in memory)."""
        for other in reversed(held):
            if other != key and other[:2] == key[:2] and other[3:] == key[3:] and \
                    held[other].digests is not None and not held[other].on_disk:
                return other
        return None

    @staticmethod
    def _versions_on_disk(held: OrderedDict, key: PartitionKey) -> tuple:
        """What goes from this actor's disk as `key` is shipped (forgotten here): `key` itself (sent again),
        and every older version of its tensor, in any partitioning (the tensor changed since)."""
        return _taken_from_disk(held, lambda other: other[:2] == key[:2] and
                                (other.version < key.version or other == key))

    def older_on_disk(self, key: PartitionKey) -> dict[str, tuple]:
        """Older versions of `key`'s tensor on other actors' disks, by actor id: forgotten here, for the
        caller to have those actors drop them (the tensor changed)."""
        found: dict[str, tuple] = {}
        with self._lock:
            for actor_id, held in self._held.items():
                stale = _taken_from_disk(held, lambda other: other[:2] == key[:2] and other.version < key.version)
                if stale:
                    found[actor_id] = stale
        return found

    def forget_disk(self, actor: Any) -> tuple:
        """A file of an actor's disk went missing: what `actor` keeps on disk, and what it read back from
        there, is forgotten here (what is needed again is shipped anew). The keys on disk, for the caller
        to have the actor drop them."""
        with self._lock:
            held = self._held.get(actor._actor_id.hex(), OrderedDict())
            for key in [key for key, entry in held.items() if entry.from_disk]:
                del held[key]
            return _taken_from_disk(held, lambda key: True)

    @staticmethod
    def _room(held: OrderedDict, key: PartitionKey, budget: int, disk_budget: int, newest: dict) -> Eviction:
        """What to evict (least recently used first, unpinned, never `key`) so that what is in memory fits
        `budget`: moved to disk while `disk_budget` allows (the least recently used there dropped to make
        room), else dropped (as is an old version of a tensor: `newest` holds each tensor's newest
        version). The evicted entries are updated here."""
        in_memory = sum(e.size for e in held.values() if not e.on_disk)
        on_disk = sum(e.size for e in held.values() if e.on_disk)
        drop, spill = [], []
        for other, entry in list(held.items()):
            if in_memory <= budget:
                break
            if entry.on_disk or entry.pins or other == key:
                continue
            in_memory -= entry.size
            if entry.size <= disk_budget and other.version >= newest.get(other[:2], -1):
                for old, old_entry in list(held.items()):
                    if on_disk + entry.size <= disk_budget:
                        break
                    if old_entry.on_disk:
                        drop.append(old)
                        on_disk -= old_entry.size
                        del held[old]
                entry.on_disk, on_disk = True, on_disk + entry.size
                spill.append(other)
            else:
                drop.append(other)
                del held[other]
        return Eviction(tuple(drop), tuple(spill))

    def release(self, actor: Any, key: PartitionKey) -> None:
        """The statement is done with it: it may be dropped from now on."""
        with self._lock:
            entry = self._held.get(actor._actor_id.hex(), {}).get(key)
            if entry is not None:
                entry.pins -= 1

    def ready(self, actor: Any, key: PartitionKey) -> Any:
        """The reference that is ready once `actor` keeps `key` (None: not in the record)."""
        with self._lock:
            entry = self._held.get(actor._actor_id.hex(), {}).get(key)
            return None if entry is None else entry.ready

    def forget(self, actor: Any, key: PartitionKey) -> None:
        """`actor` does not keep `key` after all (its keep failed)."""
        with self._lock:
            self._held.get(actor._actor_id.hex(), {}).pop(key, None)

    def held(self, actor: Any) -> dict[PartitionKey, int]:
        """The partitions `actor` keeps in memory, with their bytes."""
        with self._lock:
            return {k: e.size for k, e in self._held.get(actor._actor_id.hex(), {}).items() if not e.on_disk}

    def on_disk(self, actor: Any) -> dict[PartitionKey, int]:
        """The partitions `actor` keeps on its node's disk, with their bytes."""
        with self._lock:
            return {k: e.size for k, e in self._held.get(actor._actor_id.hex(), {}).items() if e.on_disk}


RESIDENCY = Residency()


def _taken_from_disk(held: OrderedDict, wanted: Callable[[PartitionKey], bool]) -> tuple:
    """The keys of one actor's disk that `wanted` picks, forgotten here (the caller has the actor drop them)."""
    taken = tuple(key for key, entry in held.items() if entry.on_disk and wanted(key))
    for key in taken:
        del held[key]
    return taken


def resident_key(pool: Any, table: str, version: int, partition: int, partitions: int,
                 columns: tuple[int, ...]) -> Optional[PartitionKey]:
    return PartitionKey(database_id(pool), table, version, partition, partitions, tuple(columns))
