"""The Ray cluster the 'ray' executor runs on: connecting to it and keeping one actor per worker.

Actors live as long as this process's connection to Ray and are shared by all trdb connections
in it. A statement calls no actor before it submits its fragments: an actor Ray already knows to
be dead (its core worker hears of every death from the cluster), or one a statement saw die, is
replaced first; one that dies unnoticed fails the fragments submitted to it, and so the statement,
cleanly, and is replaced by the next.
"""
from __future__ import annotations

import socket
import threading
from typing import Any, Optional

import ray
from ray.core.generated.gcs_pb2 import ActorTableData

from trdb.errors import NotSupportedError, OperationalError
from trdb.execution.ray.actor.worker import RayWorker

START_SECONDS = 120.0   # how long a new actor may take to start (worker processes, imports)
# How long the cluster's address may take to accept a connection. Ray's own connect waits minutes (and
# ignores Ctrl-C) where nothing listens; a cluster that is up answers a TCP connect at once.
PROBE_SECONDS = 5.0


def connect(address: str) -> None:
    """Connect this process to Ray (once): to `address`, or as `ray.init()` finds or starts a cluster."""
    if address.startswith("ray://"):
        raise NotSupportedError(f"the Ray executor cannot run through Ray Client ({address!r}): its workers "
                                "stream their batches (streaming actor methods), which Ray Client does not support",
                                hint="run trdb on a node of the cluster and SET ray_address = 'host:port' (the GCS "
                                     "address, port 6379 by default)")
    if ray.is_initialized():
        return
    _probe(address)
    try:
        ray.init(address=address or None)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"at {address!r}" if address else "(no ray_address set: a running local cluster, else a new one)"
        raise OperationalError(f"cannot connect to the Ray cluster {where}: {exc}",
                               hint="start one with `ray start --head`, then SET ray_address") from None


def _probe(address: str) -> None:
    """Fail at once, with a clear error, where nothing accepts a connection at a host:port address."""
    host, port = _host_port(address)
    if port is None:  # '', 'auto', 'local': Ray finds or starts the cluster itself
        return
    try:
        socket.create_connection((host, port), timeout=PROBE_SECONDS).close()
    except OSError as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
        raise OperationalError(f"cannot connect to the Ray cluster at {address!r}: nothing accepts a connection "
                               f"there ({reason})",
                               hint="start one with `ray start --head` and SET ray_address to the address it "
                                    "prints, or SET executor = 'local'") from None


def _host_port(address: str) -> tuple[str, Optional[int]]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return address, None
    return host.strip("[]"), int(port)


class ActorPool:
    """The actors of this process: one list per kind ('cpu', 'gpu'), index = worker number."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._actors: dict[str, list[Any]] = {}
        self._gpus: Any = None
        self._job: Any = None
        self._sharing: set[str] = set()  # CPU actors started when no CPU was free: moved once one is
        self._finished: dict[str, list[str]] = {}  # by actor id: executions ended cleanly there, not yet told

    def wants_gpus(self, device: str) -> bool:
        """GPU actors when the device setting asks for a GPU, or allows one ('auto') and the cluster has them."""
        if device != "auto":
            return device == "gpu"
        with self._lock:
            self._check_job()
            if self._gpus is None:  # asked once per connection to Ray: it is a call to the cluster
                self._gpus = ray.cluster_resources().get("GPU", 0)
            return self._gpus > 0

    def actors(self, count: int, gpu: bool) -> list[Any]:
        """`count` live actors of the kind, started or replaced as needed."""
        with self._lock:
            self._check_job()
            pool = self._actors.setdefault("gpu" if gpu else "cpu", [])
            pool.extend([None] * (count - len(pool)))
            self._drop_dead(pool, count)
            if not gpu:
                self._move_sharing(pool, count)
            missing = [i for i in range(count) if pool[i] is None]
            if missing:  # asking the cluster for its free resources is a call: only when starting actors
                for index, options in zip(missing, _resources(len(missing), gpu)):
                    pool[index] = RayWorker.options(**options).remote(index)
                    if options.get("num_cpus", 1) == 0 and not gpu:
                        self._sharing.add(pool[index]._actor_id.hex())
                self._wait_started(pool, missing)
            return pool[:count]

    def finished(self, actor: Any, execution_id: str) -> None:
        """An execution ended cleanly in `actor`: it forgets it with its next fragment (no call of its own)."""
        with self._lock:
            self._finished.setdefault(actor._actor_id.hex(), []).append(execution_id)

    def take_finished(self, actor: Any) -> tuple:
        """The executions `actor` is to forget, told with the fragment about to be sent to it."""
        with self._lock:
            return tuple(self._finished.pop(actor._actor_id.hex(), ()))

    def lost(self, actor: Any) -> None:
        """An actor a statement saw die: the next statement replaces it, whatever Ray's record says yet."""
        with self._lock:
            for pool in self._actors.values():
                for index, held in enumerate(pool):
                    if held is not None and held._actor_id == actor._actor_id:
                        pool[index] = None
        try:
            ray.kill(actor)  # should it still run (a lost connection, not a death), it ends now
        except Exception:  # already gone
            pass

    def _move_sharing(self, pool: list, count: int) -> None:
        """Actors sharing a CPU are replaced (between statements) by ones of their own once the cluster has
        free CPUs: a node added to the cluster is used by the next statement."""
        sharing = [i for i in range(count) if pool[i] is not None and pool[i]._actor_id.hex() in self._sharing]
        if not sharing:
            return
        free = int(ray.available_resources().get("CPU", 0))  # a call to the cluster: only while actors share
        for index in sharing[:free]:
            self._sharing.discard(pool[index]._actor_id.hex())
            ray.kill(pool[index])
            pool[index] = None

    def live(self) -> list[Any]:
        """Every actor this process holds now (of every kind)."""
        with self._lock:
            return [actor for pool in self._actors.values() for actor in pool if actor is not None]

    def _check_job(self) -> None:
        context = ray.get_runtime_context()
        job = (context.get_session_name(), context.get_job_id())  # job ids restart at 1 in every new cluster
        if job != self._job:  # a new connection to Ray: the old actors went with the old one
            self._actors, self._gpus, self._job = {}, None, job
            self._sharing = set()

    @staticmethod
    def _drop_dead(pool: list, count: int) -> None:
        """Actors Ray knows to be dead (its local record, kept current by the cluster: no call) are replaced."""
        for index in range(count):
            if pool[index] is not None and pool[index]._get_local_state() == ActorTableData.DEAD:
                pool[index] = None

    @staticmethod
    def _wait_started(pool: list, started: list[int]) -> None:
        for index in started:
            try:
                ray.get(pool[index].ping.remote(), timeout=START_SECONDS)
            except (ray.exceptions.RayError, TimeoutError) as exc:
                ray.kill(pool[index])
                pool[index] = None
                raise OperationalError(f"Ray worker {index} could not be started: {type(exc).__name__}: {exc}",
                                       hint="check the cluster's free resources with `ray status`") from None


def _resources(count: int, gpu: bool) -> list[dict]:
    """Each new actor reserves a CPU while the cluster has one free (further ones share); GPU actors
    reserve a GPU each, or an equal share of the free GPUs when there are fewer than actors."""
    available = ray.available_resources()
    if gpu:
        free = available.get("GPU", 0)
        if free <= 0:
            raise OperationalError("the device setting asks for GPU workers, but the Ray cluster has no free GPU",
                                   hint="SET device = 'cpu'")
        return [{"num_gpus": min(1.0, free / count), "num_cpus": 0}] * count
    free = int(available.get("CPU", 0))
    return [{"num_cpus": 1 if n < free else 0} for n in range(count)]


POOL = ActorPool()
