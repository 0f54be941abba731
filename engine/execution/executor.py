"""Runs a physical plan: instantiates its operators per partition (interpreter.py), starts exchange producers."""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Iterator

from trdb.execution.exchange.channel import Channel, produce
from trdb.execution.interpreter import exchange_for, operator_for, router_for
from trdb.execution.operators.operator import ExecContext, PhysicalOperator, drain
from trdb.execution.tile_math.product_sharing import ProductShare
from trdb.execution.workers import ThreadWorkers, Workers
from trdb.plan.physical import PhysicalNode


class Execution:
    """One run of a plan. Use as a context manager: closing stops every worker and waits for it."""

    def __init__(self, root: PhysicalNode, ctx: ExecContext, workers: Callable[[], Workers] = ThreadWorkers):
        self.root = root
        self.ctx = ctx
        self.workers = workers()
        self.instances: dict[int, list[PhysicalOperator]] = defaultdict(list)
        self.channels: dict[int, Channel] = {}     # by node, for EXPLAIN ANALYZE
        self._by_path: dict[tuple, Channel] = {}   # by place in the tree: a shared subplan runs once per place
        self._shares: dict[tuple, ProductShare] = {}  # by place: the instances of an aggregate share products
        self._operator: PhysicalOperator | None = None

    def __enter__(self) -> "Execution":
        try:  # a producer that cannot start: those started already are stopped and waited for
            self._operator = self._instantiate(self.root, 0, ())
            self._operator.open(self.ctx)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def rows(self) -> Iterator[tuple]:
        return drain(self._operator)

    def keep_result(self, rows) -> None:
        """The tuples it made are kept in `rows` for other plans to read (the Ray executor keeps its
        workers' copies too while `rows` lives); threads read `rows` itself."""

    def batches(self) -> Iterator[list]:
        """The root's batches as its operators made them (bounded in bytes where tiles are large)."""
        return iter(self._operator.next_batch, None)

    def __exit__(self, *exc) -> None:
        try:
            if self._operator is not None:
                self._operator.close()
        finally:
            self.ctx.state.cancelled.set()  # producers still running (LIMIT, errors) stop now
            self.workers.join()

    def _instantiate(self, node: PhysicalNode, partition: int, path: tuple) -> PhysicalOperator:
        """The operator of `node` for one partition; `path` says where in the tree this occurrence is."""
        if node.exchange is not None:
            channel = self._by_path.get(path) or self._start_exchange(node, path)
            operator = exchange_for(node, channel, partition)
        else:
            children = [self._instantiate(child, partition if child.instances > 1 else 0, path + (n,))
                        for n, child in enumerate(node.children)]
            operator = operator_for(node, children, partition)
            if node.instances > 1 and hasattr(operator, "share_products"):
                operator.share_products(self._shares.setdefault(path, ProductShare(self.ctx.state)))
            if self.ctx.canvas is not None and node is self.ctx.canvas.node:
                operator.canvas = self.ctx.canvas  # its groups' sums are written into the result's array
        self.instances[id(node)].append(operator)
        return operator

    def _start_exchange(self, node: PhysicalNode, path: tuple) -> Channel:
        child = node.children[0]
        channel = Channel(node.instances, child.instances, self.ctx.state)
        self.channels[id(node)] = self._by_path[path] = channel
        router = router_for(node.exchange)
        for producer in range(child.instances):
            operator = self._instantiate(child, producer, path + (0,))
            self.workers.start(f"{node.operator}-{producer}",
                               lambda op=operator: produce(op, self.ctx, channel, router, node.instances))
        return channel
