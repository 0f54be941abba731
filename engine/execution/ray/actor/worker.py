"""The Ray actor of the 'ray' executor: one per worker, it runs plan fragments and takes in their inputs.

`run` runs one fragment (the operators below an exchange, down to the next exchanges and scans) and
routes each output batch to consumer partitions as the exchange's router says. A small output comes
back whole in its reply, one round trip for the fragment; a larger one waits in the actor for
`resume`, a streaming generator that yields for each piece a small header (its partitions, tuples
and bytes) and then the rows, which Ray stores as one object (shared memory on the node; numpy
arrays are read back without a copy); a small batch travels in its header's item. A fragment the
plan expects to return more than a reply holds is sent to `stream` instead, which streams its output
from the start (no round trip for `resume`). The last item carries the operators' metrics and the
process id. Methods run in threads of their own concurrency groups, so a blocked `feed` never holds
up a fragment or `release`.
"""
from __future__ import annotations

import os
from typing import Iterator, Optional

import ray

from trdb.execution.exchange.channel import batch_bytes
from trdb.execution.interpreter import router_for
from trdb.execution.operators.operator import Batch, ExecContext, OperatorMetrics, PhysicalOperator

# the modules, not their globals: Ray ships this class by value
from trdb.execution.ray import cross_process_canvas, fragments, kept_subplans
from trdb.execution.ray.actor import inbox, resident
from trdb.execution.ray.destinations import pieces
from trdb.kernels.device_choice import backend_for
from trdb.plan.physical_operators import Exchange

RUN_THREADS = 128    # fragments one actor can run at once: a statement's exchanges and scans, per worker
FEED_THREADS = 256   # feeds that can wait at once for room in a full queue
INLINE_BYTES = 64 << 10  # a batch up to this size travels in its header's item (Ray inlines small objects)


def preorder(operator: PhysicalOperator) -> Iterator[PhysicalOperator]:
    """The operators of a fragment, parents before children (the order metrics travel back in)."""
    yield operator
    for child in operator.children:
        yield from preorder(child)


def host_rows(rows: Batch, backend) -> Batch:
    """Rows leaving the actor: device tiles are copied to the host (the consumer may have no GPU)."""
    if backend.name == "numpy":
        return rows
    return [tuple(v.get() if hasattr(v, "__cuda_array_interface__") else v for v in row) for row in rows]


@ray.remote(concurrency_groups={"control": 1, "run": RUN_THREADS, "feed": FEED_THREADS})
class RayWorker:
    def __init__(self, index: int):
        self.index = index

    @ray.method(concurrency_group="control")
    def ping(self) -> int:
        return os.getpid()

    @ray.method(concurrency_group="control")
    def release(self, execution_id: str) -> None:
        inbox.INBOXES.release(execution_id)

    @ray.method(concurrency_group="feed")
    def feed(self, execution_id: str, key: int, partition: int, producers: int, producer: int,
             rows: Optional[Batch], sent: int = 0) -> bool:
        return inbox.INBOXES.deliver(execution_id, key, partition, producers, producer, rows, sent)

    @ray.method(concurrency_group="feed")
    def keep(self, key: resident.PartitionKey, rows: Batch, drop: tuple, spill: tuple = ()) -> int:
        """Keep a tensor partition across statements (dropping `drop` and moving `spill` to disk first); its bytes
        (or the error that kept it from being kept: see `_outcome`)."""
        return _outcome(resident.STORE.keep, key, rows, drop, spill)

    @ray.method(concurrency_group="feed")
    def patch(self, key: resident.PartitionKey, base: resident.PartitionKey, items: list, drop: tuple,
              _base_ready: int = 0, spill: tuple = ()) -> int:
        """Keep a new version of a partition from its changed tiles and `base`, kept here (Ray resolves
        `_base_ready`, the reference of base's own keep, first); its bytes, or an error (`_outcome`)."""
        if isinstance(_base_ready, BaseException):
            return _base_ready
        return _outcome(resident.STORE.patch, key, base, items, drop, spill)

    @ray.method(concurrency_group="feed")
    def load(self, key: resident.PartitionKey, source, drop: tuple, spill: tuple = ()) -> int:
        """Read a tensor partition here (`source()`: from storage this node can read) and keep it; its bytes.
        The tiles are this process's own already: kept as they are, only made read-only. Or an error (`_outcome`)."""
        return _outcome(lambda: resident.STORE.keep(key, source(), drop, spill, copy=False))

    @ray.method(concurrency_group="feed")
    def restore(self, key: resident.PartitionKey, drop: tuple, spill: tuple = ()) -> int:
        """Read a partition this actor moved to its node's disk back into memory; its bytes, or an error (`_outcome`)."""
        return _outcome(resident.STORE.restore, key, drop, spill)

    @ray.method(concurrency_group="control")
    def drop(self, keys: tuple) -> None:
        resident.STORE.drop(keys)

    @ray.method(concurrency_group="feed")
    def part(self, key: resident.PartitionKey, partition: int, partitions: int, columns: tuple) -> Batch:
        """The tuples of a kept shared subplan's partition that hash to `partition` (for another actor)."""
        return kept_subplans.part(key, partition, partitions, columns)

    @ray.method(concurrency_group="control")
    def node(self) -> str:
        """The id of the Ray node this actor runs on."""
        return ray.get_runtime_context().get_node_id()

    @ray.method(concurrency_group="control")
    def held(self) -> dict:
        return resident.STORE.held()

    @ray.method(concurrency_group="run")
    def run(self, execution_id: str, call: tuple, *kept: int) -> tuple:
        """Run a fragment. `call` is one argument (Ray serialises each on its own): (key, payload, route,
        consumers, device, finished, keep, keep_limit). The fragment is the one `key` names (`payload`: it
        pickled, the first time this actor runs it), routed by `route` to `consumers` partitions, on `device`;
        `keep`: its output is also kept here under that key (a shared subplan's), if within `keep_limit`
        bytes; `finished`:
        executions that ended cleanly since this actor's last fragment (forgotten here now: their release costs
        no call of its own); `kept`: the partitions its scans read that may not be here yet, which Ray waits for
        before it starts. The reply: its whole output when small ("end", metrics, pid, pieces); else
        ("more", n), the fragment waiting with its output for `resume(n)`; ("released",) when the
        statement has ended already."""
        started = _start(execution_id, call, kept)
        if started is None:
            return ("released",)
        execution, items = started
        try:
            first = next(items)
        except StopIteration as end:
            return end.value
        return ("more", execution.park(first, items))

    @ray.method(concurrency_group="run")
    def resume(self, execution_id: str, token: int):
        """Stream the output of a fragment `run` left waiting, then its last item ("end", metrics, pid, [], kept)."""
        execution = inbox.INBOXES.execution(execution_id)
        parked = execution.unpark(token) if execution is not None else None
        if parked is None:
            return  # released: the statement has ended
        first, items = parked
        yield first
        last = yield from items
        yield last

    @ray.method(concurrency_group="run")
    def stream(self, execution_id: str, call: tuple, *kept: int):
        """`run`, its output streamed from the start (a fragment expected to return more than fits a reply:
        no round trip for `resume`); nothing when the statement has ended already."""
        started = _start(execution_id, call, kept)
        if started is None:
            return
        last = yield from started[1]
        yield last


def _outcome(action, *args) -> object:
    """What `action(*args)` returns, or the error it raised, returned. A partition a fragment reads is kept
    by a call whose result the fragment's call takes as an argument (Ray runs it once that is ready);
    were it to fail, Ray would never send the fragment's call, and the actor would wait for it (30 s)
    before running anything else from the driver. So it does not fail: the fragment raises its error."""
    try:
        return action(*args)
    except Exception as exc:
        return exc


def _start(execution_id: str, call: tuple, kept: tuple):
    """(the execution, the fragment's streamed items) for `run` or `stream`; None if it has ended. `kept`:
    what the calls that kept its partitions returned (an error is raised here)."""
    for outcome in kept:
        if isinstance(outcome, BaseException):
            raise outcome
    key, payload, route, consumers, device, finished, keep, keep_limit, ticket = call
    for done in finished:
        inbox.INBOXES.release(done)
    execution = inbox.INBOXES.execution(execution_id)
    if execution is None:
        return None
    fragment = fragments.CACHE.fragment(key, payload, execution_id)
    return execution, _output(fragment, route, consumers, execution, device, keep, keep_limit, ticket)


def _output(fragment: PhysicalOperator, route: Exchange, consumers: int, execution, device: str,
            keep: Optional[resident.PartitionKey], keep_limit: int, ticket: Optional[cross_process_canvas.Ticket]):
    """A fragment's routed output as streamed items (`_items`), kept here too under `keep` if given;
    returns its last item. `ticket`: the driver's result array, where the fragment (the result's last
    aggregate or projection) places its tiles if this actor can map it (cross_process_canvas.py)."""
    backend = backend_for(device)
    execution.backend = backend
    output = _Output(keep_limit) if keep is not None else None
    canvas = cross_process_canvas.attach(ticket) if backend.on_host else None
    if canvas is not None:
        fragment.canvas = canvas
    try:
        fragment.open(ExecContext(backend, None, execution.state))
        held = yield from _items(fragment, router_for(route), consumers, backend, output, canvas)
    except GeneratorExit:  # closed while waiting: the statement has ended
        raise
    except BaseException as exc:
        execution.state.fail(exc)  # the other fragments of this statement here stop too
        raise
    finally:
        fragment.close()
        if canvas is not None:
            fragment.canvas = None  # the shared array is unmapped once its views here are gone
    metrics: list[OperatorMetrics] = [op.metrics for op in preorder(fragment)]
    return "end", metrics, os.getpid(), held, output is not None and output.keep(keep)


def _items(fragment: PhysicalOperator, route_batch, consumers: int, backend, output: Optional["_Output"],
           canvas=None):
    """The streamed items of a fragment's routed output (tiles placed in `canvas` as markers); returns the
    pieces held back for the last item.

    Pieces are held back while their bytes add up to at most INLINE_BYTES: a small result travels
    whole in the last item, one round trip for the fragment. Past that, what was held goes first
    and every piece is streamed: a small one in one item with its header, a large one in two."""
    held: Optional[list] = []
    total = 0
    while (batch := fragment.next_batch()) is not None:
        if output is not None:
            output.add(host_rows(batch, backend))
        if canvas is not None:
            batch = cross_process_canvas.marked(batch, canvas)
        for partitions, rows in pieces(route_batch(batch, consumers)):
            size = batch_bytes(rows)
            item = (partitions, len(rows) * len(partitions), size * len(partitions), host_rows(rows, backend))
            if held is not None and total + size <= INLINE_BYTES:
                held.append(item)
                total += size
                continue
            for waiting in held or ():  # not `yield from` a list: Ray sends its StreamingGeneratorStats into
                yield waiting           # the generator, and a list iterator has no send()
            held = None
            if size <= INLINE_BYTES:
                yield item
            else:
                yield item[:3]
                yield item[3]
    return held or []


class _Output:
    """A fragment's output, kept while within `limit` bytes (past it, none of it is)."""

    def __init__(self, limit: int):
        self.rows: Optional[list] = []
        self.size, self.limit = 0, limit

    def add(self, rows: Batch) -> None:
        if self.rows is None or not rows:
            return
        self.size += batch_bytes(rows)
        if self.size > self.limit:
            self.rows = None
        else:
            self.rows.extend(rows)

    def keep(self, key: resident.PartitionKey) -> bool:
        """Keep it under `key`; whether it was within the limit (and so is kept)."""
        if self.rows is None:
            return False
        resident.STORE.keep(key, self.rows)
        return True
