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
from typing import Any, Callable, Optional

from trdb.execution.ray.resident import PartitionKey

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
    __slots__ = ("size", "ready", "pins", "digests")

    def __init__(self, size: int):
        self.size, self.ready, self.pins = size, None, 0
        self.digests: Optional[Any] = None  # a future of the digest per tile key of what was shipped (None: read
        # by the actor itself)


class Residency:
    """What each actor (by actor id) keeps: partition keys in least recently used order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, OrderedDict[PartitionKey, _Entry]] = {}

    def forget_actors_except(self, live: set[str]) -> None:
        """Actors that are gone (dead, replaced, or of an earlier connection to Ray) keep nothing."""
        with self._lock:
            for actor in [a for a in self._held if a not in live]:
                del self._held[actor]

    def acquire(self, actor: Any, key: PartitionKey, size: int, budget: int,
                ship: Callable[[tuple, Optional[tuple]], tuple[Any, Any]]) -> tuple[Any, bool]:
        """Pin `key` in `actor` for a statement: (a reference that is ready once the actor has it, whether
        it was shipped now). `ship(drop, base)` sends it, dropping `drop` to make room, and gives (that
        reference, a future of its tiles' digests or None); `base` is (key, digests, reference) of another
        version of the same partition the actor keeps (pinned now, for the caller to `release`), which the
        actor may build it from."""
        actor_id = actor._actor_id.hex()
        with self._lock:
            held = self._held.setdefault(actor_id, OrderedDict())
            entry = held.get(key)
            if entry is not None:
                held.move_to_end(key)
                entry.pins += 1
                return entry.ready, False
            base = self._base(held, key)
            if base is not None:
                held[base].pins += 1
            drop = self._room(held, size, budget)
            entry = held[key] = _Entry(size)
            entry.pins += 1
            entry.ready, entry.digests = ship(drop, None if base is None else (base, held[base].digests,
                                                                              held[base].ready))
            return entry.ready, True

    @staticmethod
    def _base(held: OrderedDict, key: PartitionKey) -> Optional[PartitionKey]:
        """The most recently used other version of `key`'s partition that was shipped with digests."""
        for other in reversed(held):
            if other[:2] == key[:2] and other[3:] == key[3:] and held[other].digests is not None:
                return other
        return None

    @staticmethod
    def _room(held: OrderedDict, size: int, budget: int) -> tuple:
        """Keys to drop (least recently used, unpinned) so that `size` more bytes fit in `budget`."""
        total = sum(e.size for e in held.values()) + size
        drop = []
        for key, entry in list(held.items()):
            if total <= budget:
                break
            if entry.pins == 0:
                drop.append(key)
                total -= entry.size
                del held[key]
        return tuple(drop)

    def release(self, actor: Any, key: PartitionKey) -> None:
        """The statement is done with it: it may be dropped from now on."""
        with self._lock:
            entry = self._held.get(actor._actor_id.hex(), {}).get(key)
            if entry is not None:
                entry.pins -= 1

    def held(self, actor: Any) -> dict[PartitionKey, int]:
        with self._lock:
            return {k: e.size for k, e in self._held.get(actor._actor_id.hex(), {}).items()}


RESIDENCY = Residency()


def resident_key(pool: Any, table: str, version: int, partition: int, partitions: int,
                 columns: tuple[int, ...]) -> Optional[PartitionKey]:
    return PartitionKey(database_id(pool), table, version, partition, partitions, tuple(columns))
