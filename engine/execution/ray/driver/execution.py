"""The 'ray' executor: the same physical plan and operators, with the fragments run by Ray actors.

The plan is cut at its exchanges and its scans. Each producer instance of an exchange (the
operators below it, down to the next exchanges and scans) is shipped to the actor of its partition
and run there (`RayWorker.run`). Scans hold the database, so they run on the driver and feed their
tuples to the fragment that reads them. The final gather, the only operator that runs on the
driver, reads the streams of the fragments under it itself (gather.py); a driver task per other
fragment passes each routed batch on, as an object reference, to the actor of its consumer
partition. Fragments are cached by plan in the actors (fragments.py). The first error anywhere (a kernel
error raised in an actor, an actor that died) fails the statement; ending the execution releases
it in every actor, which stops what still runs of it there.
"""
from __future__ import annotations

import itertools
import threading
import uuid
from collections import OrderedDict
from functools import partial
from typing import Any, Optional

import ray

from trdb.errors import NotSupportedError, OperationalError, QueryCancelled
from trdb.execution.exchange.channel import POLL_SECONDS, Channel, batch_bytes
from trdb.execution.executor import Execution
from trdb.execution.interpreter import exchange_for, operator_for, router_for
from trdb.execution.operators.operator import ExecContext, PhysicalOperator
from trdb.execution.operators.tensor_scan import TensorScanExec
from trdb.execution.ray.actor.disk_cache import CacheFileLost
from trdb.execution.ray.actor.inbox import FeedExec, RemoteChannel
from trdb.execution.ray.actor.resident import PartitionKey
from trdb.execution.ray.actor.worker import FEED_THREADS, INLINE_BYTES, RUN_THREADS, preorder
from trdb.execution.ray.cross_process_canvas import SharedCanvas, Ticket
from trdb.execution.ray.destinations import FEED_SLOTS, ActorDestination, LocalDestination, Moved, Slots, pieces, settle
from trdb.execution.ray.driver.cluster import POOL, connect
from trdb.execution.ray.driver.gather import StreamGather
from trdb.execution.ray.driver.residency import RESIDENCY, TOTAL, Shipped
from trdb.execution.ray.driver.scans import ResidentScans
from trdb.execution.ray.driver.threads import PooledWorkers
from trdb.execution.ray.fragments import SENT, fingerprint, plan_token
from trdb.execution.ray.kept_subplans import KeptOutput
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.plan.physical import SINGLE, PhysicalNode
from trdb.plan.physical_operators import Broadcast, Exchange, Gather

STREAM_BYTES = 4 * INLINE_BYTES  # a fragment's expected output past this is streamed from the start
GENERATOR_WINDOW = 16  # objects a fragment may yield ahead of the driver (each batch is a header and its rows)
FEED = Gather()  # a scan inside a fragment sends all its tuples to the one operator reading it
_READY_LOCK = threading.Lock()
_READY: "OrderedDict[Any, None]" = OrderedDict()  # kept partitions' references seen resolved, without error
READY_KEPT = 4096


def gathered(root: PhysicalNode) -> PhysicalNode:
    """The plan with a gather on top: everything but that gather runs in actors."""
    if root.exchange is not None:
        return root
    return PhysicalNode(Gather(), "1 -> 1", (root,), root.schema, SINGLE, root.estimate, root.cost)


class RayExecution(Execution):
    """One run of a plan on the Ray cluster; the same interface as `Execution`."""

    def __init__(self, root: PhysicalNode, ctx: ExecContext, settings, keep: bool = False):
        super().__init__(gathered(root), ctx, PooledWorkers)
        self._token = plan_token(root)  # fragments are cached by plan (fragments.py)
        connect(settings.ray_address)
        gpu = POOL.wants_gpus(settings.device)
        self.device = settings.device if gpu else "cpu"
        self.actors = POOL.actors(settings.workers, gpu)
        self.id = uuid.uuid4().hex
        self.pids: set[int] = set()          # the actor processes that ran this plan's fragments
        self._keys = itertools.count()
        self._keys_by_path: dict[tuple, int] = {}
        self._locations: dict[int, dict[int, int]] = {}   # by exchange key: the worker of each consumer partition
        self._slots: dict[int, dict[int, Slots]] = {}      # by exchange key: each consumer partition's feed slots
        self._tasks: list[tuple[str, Any]] = []
        self._gathers: list[StreamGather] = []
        self._fragments = [0] * len(self.actors)  # per actor, checked against its threads
        self._ended = 0                           # fragments whose actor sent their last item
        self._inboxes = [0] * len(self.actors)
        # scans hand host arrays to actors; they read within the database's memory budget
        self._leaf_ctx = ExecContext(NUMPY_BACKEND, ctx.catalog, ctx.state, ctx.host_budget, ctx.spill)
        self.shipped = Shipped(TOTAL)  # the bytes this execution sent to actors (EXPLAIN ANALYZE)
        live = {actor._actor_id.hex() for actor in POOL.live()}
        RESIDENCY.forget_actors_except(live)
        SENT.forget_actors_except(live)
        self._resident = ResidentScans(self.actors, self._leaf_ctx, settings.ray_resident_bytes, self.shipped,
                                       settings.ray_disk_cache_bytes)
        self._kept = KeptOutput(self.id, self.root.children[0], settings.ray_resident_bytes) if keep else None
        # the result's array in shared memory, where actors on this machine place its tiles (shared_canvas.py)
        self._canvas = SharedCanvas(ctx.canvas) if ctx.canvas is not None else None

    def __enter__(self) -> "RayExecution":
        try:
            self._operator = self._instantiate(self.root, 0, ())  # the root is a gather: all else is remote
            self._check_load()
            for name, task in self._tasks:
                self.workers.start(name, task)
            for gather in self._gathers:
                gather.start()
            self._operator.open(self.ctx)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self._operator is not None:
                self._operator.close()
        finally:
            clean = not self.ctx.state.cancelled.is_set() and self._ended == sum(self._fragments)
            if exc[0] is not None and self._kept is not None:
                self._kept.discard()
            self.ctx.state.cancelled.set()
            for gather in self._gathers:
                gather.close()
            self.workers.join()
            clean = clean and self._ended == sum(self._fragments) and self.ctx.state.first_error is None
            for actor in self.actors:
                if clean:  # nothing of it runs there: forgotten with the actor's next fragment, no call now
                    POOL.finished(actor, self.id)
                else:
                    actor.release.remote(self.id)  # stops this execution's fragments and feeds there
            self._tasks = []  # they refer back to this execution: without them its plan (and tuples) go with it
            self._gathers = []
            self._resident.release(failed=not clean)
            if self._canvas is not None:
                self._canvas.close()

    # ------------------------------------------------------------ cutting the plan into fragments

    def _start_exchange(self, node: PhysicalNode, path: tuple) -> Any:
        """An exchange whose consumers are on the driver (the final gather): it reads the fragments under it
        itself (gather.py); scans under it run on driver threads that feed a channel."""
        moved = self.channels[id(node)] = Moved()
        child = node.children[0]
        if child.children or child.exchange is not None:  # fragments, never a scan on the driver
            gather = self._by_path[path] = StreamGather(self.ctx.state, moved, self.failure,
                                                        self._canvas.received if self._canvas is not None else None)
            self._gathers.append(gather)
            self._producers(node, path, lambda producer: gather, self._kept)
            return gather
        channel = Channel(node.instances, child.instances, self.ctx.state)
        self._by_path[path] = channel
        self._producers(node, path, lambda producer: LocalDestination(channel, moved), self._kept)
        return channel

    def keep_result(self, rows) -> None:
        """The run's tuples are `rows` (a shared subplan's): the actors keep their copies while it lives."""
        if self._kept is not None:
            self._kept.attach(rows)

    def _producers(self, node: PhysicalNode, path: tuple, destination, kept: Optional[KeptOutput] = None) -> None:
        """Each producer of an exchange: a fragment shipped to an actor, or a scan routed from the driver."""
        child = node.children[0]
        for producer in range(child.instances):
            worker = producer % len(self.actors)
            resident = self._resident.scan(child, producer, worker) if not child.children else None
            if resident is not None:  # a tensor partition kept in the actor: it routes the tuples there
                self.instances[id(child)].append(resident)
                self._fragments[worker] += 1
                key = fingerprint(self._token, path, producer, [resident])
                task = partial(self._run_fragment, resident, worker, node.exchange, node.instances,
                               destination(producer), key, kept and kept.key(producer, self.actors[worker]),
                               _expects_much(child))
            elif not child.children and child.exchange is None:  # a scan on the driver: fed from here
                scan = operator_for(child, [], producer)
                self.instances[id(child)].append(scan)
                task = partial(self._run_scan, scan, node.exchange, node.instances, destination(producer))
            else:
                fragment = self._remote(child, producer, path + (0,), worker)
                self._fragments[worker] += 1
                key = fingerprint(self._token, path, producer, list(preorder(fragment)))
                keep = kept and kept.key(producer, self.actors[worker])
                to = destination(producer)
                streamed = _expects_much(child)
                if isinstance(to, StreamGather):  # read by the gather's own thread: no driver task
                    ticket = self._ticket(child) if keep is None else None
                    to.add(partial(self._submit, fragment, worker, node.exchange, node.instances, key, keep, streamed,
                                   ticket),
                           partial(self._resume, worker), worker, partial(self._take, fragment, keep=keep), streamed)
                    continue
                task = partial(self._run_fragment, fragment, worker, node.exchange, node.instances, to, key, keep,
                               streamed)
            self._tasks.append((f"{node.operator}-{producer}", task))

    def _remote(self, node: PhysicalNode, partition: int, path: tuple, worker: int) -> PhysicalOperator:
        """The operator of `node` in a fragment that `worker` runs."""
        if node.exchange is not None:
            operator = self._remote_exchange(node, partition, path, worker)
        elif not node.children:
            return self._scan(node, partition, worker)
        else:
            children = [self._remote(child, partition if child.instances > 1 else 0, path + (n,), worker)
                        for n, child in enumerate(node.children)]
            operator = operator_for(node, children, partition)
        self.instances[id(node)].append(operator)
        return operator

    def _remote_exchange(self, node: PhysicalNode, partition: int, path: tuple, worker: int) -> PhysicalOperator:
        """The consumer side of an exchange inside a fragment: it reads its actor's inbox."""
        child = node.children[0]
        if isinstance(node.spec, Broadcast) and not child.children:  # a broadcast scan: the actor keeps it whole
            resident = self._resident.scan(child, partition, worker, whole=True)
            if resident is not None:
                self.instances[id(child)].append(resident)
                return resident
        producers = node.children[0].instances
        key = self._keys_by_path.get(path)
        if key is None:
            key = self._keys_by_path[path] = self._new_key()
            moved = self.channels[id(node)] = Moved()
            self._producers(node, path, lambda producer: ActorDestination(
                self.ctx.state, self.actors, self.id, key, self._locations[key], self._slots[key],
                (producer, producers), moved, self.failure))
        self._place(key, partition, worker)
        return exchange_for(node, RemoteChannel(self.id, key, producers), partition)

    def _scan(self, node: PhysicalNode, partition: int, worker: int) -> PhysicalOperator:
        """A scan of a partition the actor keeps; else one on the driver that feeds its tuples to the
        fragment, where a FeedExec stands in for it."""
        resident = self._resident.scan(node, partition, worker)
        if resident is not None:
            self.instances[id(node)].append(resident)
            return resident
        scan = operator_for(node, [], partition)
        self.instances[id(node)].append(scan)
        key = self._new_key()
        self._place(key, 0, worker)
        destination = ActorDestination(self.ctx.state, self.actors, self.id, key, self._locations[key],
                                       self._slots[key], (0, 1), Moved(), self.failure)
        self._tasks.append((f"{node.operator}-{partition}", partial(self._run_scan, scan, FEED, 1, destination)))
        return FeedExec(RemoteChannel(self.id, key, 1), 0, node.operator)

    def _new_key(self) -> int:
        key = next(self._keys)
        self._locations[key], self._slots[key] = {}, {}
        return key

    def _place(self, key: int, partition: int, worker: int) -> None:
        """Consumer partition `partition` of exchange `key` reads its inbox in actor `worker`."""
        self._locations[key][partition] = worker
        self._slots[key][partition] = Slots()
        self._inboxes[worker] += 1

    def _check_load(self) -> None:
        """Each actor has threads for a fixed number of fragments and of feeds waiting for room."""
        if max(self._fragments) > RUN_THREADS or max(self._inboxes) * FEED_SLOTS > FEED_THREADS:
            raise NotSupportedError(f"the plan needs {max(self._fragments)} fragments and "
                                    f"{max(self._inboxes)} inboxes in one Ray worker; the Ray executor runs at "
                                    f"most {RUN_THREADS} and {FEED_THREADS // FEED_SLOTS}",
                                    hint="SET executor = 'local'")

    # ------------------------------------------------------------ driver threads

    def _run_fragment(self, fragment: PhysicalOperator, worker: int, route: Exchange, consumers: int,
                      destination, key: tuple, keep: Optional[PartitionKey] = None, streamed: bool = False) -> None:
        """A driver task: ship a fragment to its actor and pass each batch it yields on to its consumers (and
        have the actor keep them under `keep`, a shared subplan's); `streamed`: its output is streamed from
        the start (it is expected to be large)."""
        pending, cancellable = None, False
        try:
            pending, confirm, cancellable = self._submit(fragment, worker, route, consumers, key, keep, streamed)
            reply = None if streamed else settle(pending, self.ctx.state)
            if reply is not None and reply[0] != "more":
                confirm()
                if not self._take(fragment, reply, destination, None, keep):
                    raise StopIteration  # released before it ran
            else:
                if reply is not None:  # a large output: streamed from now on
                    pending, cancellable = self._resume(worker, reply), True
                header = settle(self._next_ref(pending), self.ctx.state)
                confirm()
                while not self._take(fragment, header, destination, lambda: self._next_ref(pending), keep):
                    header = settle(self._next_ref(pending), self.ctx.state)
            destination.finish()
        except StopIteration:
            self.ctx.state.fail(QueryCancelled("the statement was cancelled"))
        except BaseException as exc:
            self.ctx.state.fail(self.failure(exc, worker))
            if pending is not None and cancellable:
                _cancel(pending)

    def _ticket(self, node: PhysicalNode) -> Optional[Ticket]:
        """How the fragment of `node` finds the result's shared array, if it is the operator that places
        the result's tiles."""
        if self._canvas is None or node is not self._canvas.canvas.node:
            return None
        return self._canvas.ticket

    def _submit(self, fragment: PhysicalOperator, worker: int, route: Exchange, consumers: int, key: tuple,
                keep: Optional[PartitionKey] = None, streamed: bool = False, ticket: Optional[Ticket] = None):
        """Ship a fragment to its actor: pickled, or `key` alone when the actor has it from an earlier run
        of the plan; `keep`: the actor also keeps its output under that key; `streamed`: its output is
        streamed from the start; `ticket`: where it places the result's tiles. The reference to its reply
        (or its stream), what to call once it has answered (the actor holds the fragment), and whether it
        may be cancelled: not while Ray may still hold it back for a partition its actor is being sent
        (cancelled then, it never reaches the actor, which waits 30 s for it before running anything else
        from this driver; the actor skips it anyway once the statement is released there)."""
        actor = self.actors[worker]
        actor_id = actor._actor_id.hex()
        payload = SENT.payload(actor_id, key, fragment)
        finished = POOL.take_finished(actor)
        limit = self._kept.limit if keep is not None else 0
        call = (key, payload, route, consumers, self.device, finished, keep, limit, ticket)
        ready = _pending(self._resident.ready[worker])
        if streamed:
            reply = actor.stream.options(_generator_backpressure_num_objects=GENERATOR_WINDOW).remote(
                self.id, call, *ready)
        else:
            reply = actor.run.remote(self.id, call, *ready)
        return reply, (partial(SENT.confirm, actor_id, key) if payload is not None else (lambda: None)), not ready

    def _resume(self, worker: int, reply: tuple) -> Any:
        """The stream of a fragment whose output was too large for its reply."""
        return self.actors[worker].resume.options(_generator_backpressure_num_objects=GENERATOR_WINDOW).remote(
            self.id, reply[1])

    def _take(self, fragment: PhysicalOperator, header: tuple, destination, next_rows,
              keep: Optional[PartitionKey] = None) -> bool:
        """Pass one streamed item's batches on (`next_rows()`: the rows of a large piece, the next item);
        true at the fragment's last item, which carries its metrics, the pieces it held back and whether
        it kept its output (under `keep`); false for a reply saying the statement had ended before the
        fragment ran."""
        if header[0] == "released":
            return False
        if header[0] == "end":
            for partitions, tuples, size, rows in header[3]:
                destination.deliver(partitions, rows, tuples, size)
            self._record(fragment, header[1], header[2])
            if keep is not None:
                self._kept.done(keep, header[4])
            self._ended += 1
            return True
        partitions, tuples, size = header[:3]
        rows = header[3] if len(header) > 3 else next_rows()
        destination.deliver(partitions, rows, tuples, size)
        return False

    def _next_ref(self, stream) -> Any:
        while not ray.wait([stream], timeout=POLL_SECONDS)[0]:
            self.ctx.state.raise_if_cancelled()
        return next(stream)

    def _run_scan(self, scan: PhysicalOperator, route: Exchange, consumers: int, destination) -> None:
        """A scan on the driver: its batches are routed to the consumers, or fed to the fragment that reads it."""
        route_batch = router_for(route)
        to_actors = isinstance(destination, ActorDestination)
        stored = isinstance(scan, TensorScanExec)  # else tuples computed on the driver (a shared subplan's)
        if to_actors:
            self.shipped.add(fed=1)
        try:
            scan.open(self._leaf_ctx)
            while (batch := scan.next_batch()) is not None:
                for partitions, rows in pieces(route_batch(batch, consumers)):
                    copies = len(partitions)
                    size = batch_bytes(rows) * copies
                    destination.deliver(partitions, rows, len(rows) * copies, size)
                    if to_actors:
                        self.shipped.add(size, stored=stored)
            destination.finish()
        except BaseException as exc:
            self.ctx.state.fail(self.failure(exc, None))
        finally:
            try:
                scan.close()
            except BaseException as exc:
                self.ctx.state.fail(exc)

    def _record(self, fragment: PhysicalOperator, metrics: list, pid: int) -> None:
        """The metrics the actor measured, onto the driver's copies of its operators (EXPLAIN ANALYZE)."""
        for operator, measured in zip(preorder(fragment), metrics):
            operator.metrics = measured
        self.pids.add(pid)

    def failure(self, exc: BaseException, worker: Optional[int]) -> BaseException:
        """The error a statement fails with: what an operator raised in an actor, or what Ray reports."""
        if isinstance(exc, ray.exceptions.RayTaskError):
            cause = exc.cause
            return self.failure(cause, worker) if isinstance(cause, BaseException) else _cluster_error(exc)
        if isinstance(exc, CacheFileLost):
            for actor in self.actors:  # the next statement ships what the actors' disks held
                lost = RESIDENCY.forget_disk(actor)
                if lost:
                    actor.drop.remote(lost)
            return OperationalError(f"a Ray worker lost a partition it had moved to its node's disk ({exc.path} "
                                    "was removed); the statement was rolled back and changed nothing",
                                    hint="the next statement ships the partitions the workers' disks held again")
        if not isinstance(exc, ray.exceptions.RayError):
            return exc
        if isinstance(exc, ray.exceptions.TaskCancelledError):
            return QueryCancelled("the statement was cancelled")
        if isinstance(exc, ray.exceptions.RayActorError):
            if worker is not None:
                POOL.lost(self.actors[worker])  # the next statement replaces it
            who = "a Ray worker" if worker is None else f"Ray worker {worker}"
            return OperationalError(f"{who} died during the statement ({_reason(exc)}); the "
                                    "statement was rolled back and changed nothing",
                                    hint="the next statement starts a new worker in its place")
        return _cluster_error(exc)


def _expects_much(node: PhysicalNode) -> bool:
    """Whether each instance of `node` is expected to output more than its reply should hold (then it is
    streamed from the start, one round trip fewer)."""
    estimate = node.estimate
    return estimate.rows * estimate.row_bytes > STREAM_BYTES * max(1, node.instances)


def _pending(ready: list) -> list:
    """The partitions a fragment waits for that its actor may not hold yet. Ray resolving a reference is
    a round trip; one that resolved already (a partition kept in an earlier statement) is looked at
    here instead, once (a failed keep raises its error here), and remembered."""
    with _READY_LOCK:  # once each: a fragment that scans one tensor twice (a self-join) holds its refs twice
        unknown = list(dict.fromkeys(ref for ref in ready if ref not in _READY))
    if not unknown:
        return unknown
    done, pending = ray.wait(unknown, num_returns=len(unknown), timeout=0, fetch_local=False)
    for outcome in ray.get(done):
        if isinstance(outcome, BaseException):  # a keep that failed (worker.py `_outcome`)
            raise outcome
    with _READY_LOCK:
        _READY.update(dict.fromkeys(done))
        while len(_READY) > READY_KEPT:
            _READY.popitem(last=False)
    return pending


def _reason(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    because = [line for line in lines if "because" in line]
    return (because or lines or [type(exc).__name__])[-1].rstrip(".")


def _cluster_error(exc: BaseException) -> OperationalError:
    return OperationalError(f"the Ray cluster failed during the statement ({type(exc).__name__}: {_reason(exc)}); "
                            "the statement was rolled back and changed nothing")


def _cancel(stream) -> None:
    """Cancel a fragment's task: one still queued in its actor never starts (a running one stops on release)."""
    try:
        ray.cancel(stream)
    except Exception:  # already finished, or its actor is gone
        pass
