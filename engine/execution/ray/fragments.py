"""Plan fragments cached by plan: pickled once by the driver, kept by each actor, then named by a key.

A repeated statement runs the same physical plan (the plan cache hands back the same object), so
its fragments are the same but for the execution they belong to. The driver names each fragment by
a fingerprint: a token for the plan object, the fragment's place in it and partition, and what
varies between runs of one plan (which scans read kept partitions, and which versions; which kept
shared tuples). The first
time an actor runs a fragment the driver sends it pickled with its fingerprint, and the actor keeps
the bytes; once that run has answered, the driver sends the fingerprint alone. The actor unpickles
its copy for each run (operators hold per-run state) and binds it to the execution.
"""
from __future__ import annotations

import itertools
import threading
import uuid
import weakref
from collections import OrderedDict
from typing import Any, Hashable, Optional

from ray import cloudpickle

from trdb.errors import InternalError
from trdb.execution.ray.actor.inbox import RemoteChannel
from trdb.execution.ray.actor.resident import ResidentScanExec
from trdb.execution.ray.kept_subplans import SharedScanExec

DRIVER_KEPT = 1024  # fingerprints the driver records per actor: those it may send alone
ACTOR_KEPT = 4096   # fragments an actor keeps; more than the driver records, so each it names is here

_TOKENS: dict[int, int] = {}
_TOKEN_COUNT = itertools.count()
_LOCK = threading.Lock()


def plan_token(plan: Any) -> int:
    """A number for this plan object, unique for as long as it lives in this process."""
    with _LOCK:
        token = _TOKENS.get(id(plan))
        if token is None:
            token = _TOKENS[id(plan)] = next(_TOKEN_COUNT)
            weakref.finalize(plan, _TOKENS.pop, id(plan), None)
        return token


def fingerprint(token: int, path: tuple, partition: int, operators: list) -> tuple:
    """The key of one fragment of one plan; `operators` are its operators, which say what varies between runs."""
    return token, path, partition, tuple((type(op).__name__, _varies(op)) for op in operators)


def _varies(operator: Any) -> Any:
    """What of a fragment's operator may differ between runs of one plan: the data its stand-ins read."""
    if isinstance(operator, ResidentScanExec):
        return operator.key
    if isinstance(operator, SharedScanExec):
        return tuple((actor._actor_id.hex(), key) for actor, key in operator.sources), operator.partition
    channel = getattr(operator, "channel", None)
    if isinstance(channel, RemoteChannel):
        return channel.key
    if type(operator).__module__.startswith("trdb.execution.ray."):
        return uuid.uuid4().hex  # a stand-in not known here: its fragment is never reused
    return None


class Sent:
    """On the driver: the fragments each actor (by id) is known to hold, least recently used first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, OrderedDict[Hashable, None]] = {}

    def payload(self, actor_id: str, key: Hashable, fragment: Any) -> Optional[bytes]:
        """What to send with the key: nothing when the actor holds the fragment, else the fragment pickled."""
        with self._lock:
            held = self._held.get(actor_id)
            if held is not None and key in held:
                held.move_to_end(key)
                return None
        return cloudpickle.dumps(fragment)

    def confirm(self, actor_id: str, key: Hashable) -> None:
        """A run sent with the fragment has answered: the actor holds it from now on."""
        with self._lock:
            held = self._held.setdefault(actor_id, OrderedDict())
            held[key] = None
            held.move_to_end(key)
            while len(held) > DRIVER_KEPT:
                held.popitem(last=False)

    def forget_actors_except(self, live: set[str]) -> None:
        with self._lock:
            for actor in [a for a in self._held if a not in live]:
                del self._held[actor]


SENT = Sent()


class FragmentCache:
    """In an actor: the fragments it has been sent, pickled, by fingerprint."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[Hashable, bytes] = OrderedDict()

    def fragment(self, key: Hashable, payload: Optional[bytes], execution_id: str) -> Any:
        """A fresh copy of the fragment, its channels bound to the execution; `payload` (if sent) is kept."""
        with self._lock:
            if payload is not None:
                self._kept[key] = payload
                while len(self._kept) > ACTOR_KEPT:
                    self._kept.popitem(last=False)
            else:
                payload = self._kept.get(key)
                if payload is None:
                    raise InternalError("the Ray worker does not hold a plan fragment the driver recorded as sent")
            self._kept.move_to_end(key)
        fragment = cloudpickle.loads(payload)
        _bind(fragment, execution_id)
        return fragment


def _bind(operator: Any, execution_id: str) -> None:
    channel = getattr(operator, "channel", None)
    if isinstance(channel, RemoteChannel):
        channel.execution_id = execution_id
    for child in operator.children:
        _bind(child, execution_id)


CACHE = FragmentCache()  # one per process: a Ray actor is a process
