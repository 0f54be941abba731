"""Physical planning: Volcano operators for each logical operator, and exchanges for `workers` partitions.

Scans are partitioned by a hash of their keys; joins either co-partition both inputs on the join
keys or broadcast one input, whichever moves fewer bytes; aggregations run where their input is
already partitioned on (a subset of) the group keys, else after a repartition, or in two phases
(local partial aggregate, exchange, final aggregate) when that moves fewer tuples; the top gathers.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional

from trdb.config.unit_costs import (
    CACHED_SCAN_BYTE_COST,
    EXCHANGE_BYTE_COST,
    PARALLEL_WORK_PER_TUPLE,
    SCAN_BYTE_COST,
    SPILL_BYTE_COST,
    TUPLE_COST_FLOPS,
)
from trdb.errors import InternalError
from trdb.optimizer.aggregation import splittable
from trdb.optimizer.banded_aggregate import band_text
from trdb.optimizer.cardinality import Estimator
from trdb.optimizer.group_sizes import key_slots, rows_per_group
from trdb.optimizer.physical_rules import JOIN_RULES, banded_aggregate, two_phase_aggregate
from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan import physical_operators as po
from trdb.plan.estimates import Estimate
from trdb.plan.physical import SINGLE, Partitioning, PhysicalNode
from trdb.planner.expression_text import assignments, column_names, render

Want = Optional[tuple[int, ...]]
# a split DenseEinsum's row blocks a thread takes on average: a thread slowed by other work on its core
# takes fewer of them, and the threads end together (optimizer/rules/dense_products.py)
BLOCKS_PER_THREAD = 4


def plan_physical(plan: lp.Plan, workers: int = 1, catalog=None, min_parallel_cost: float = 0.0,
                  threads: bool = True, disabled: frozenset = frozenset()) -> PhysicalNode:
    """The physical plan of a logical plan for `workers` partitions, gathered to one at the top.

    A plan estimated to cost less than `min_parallel_cost` runs on one worker, and so does one whose kernels
    do little work for its tuples (`_tuple_bound`) when the workers are `threads` of this process (the local
    executor; Ray's actors are processes), and one where no operator has as many tuples as there
    are workers: partitions could not spread its work, and BLAS's threads share its kernels instead (a
    product of two single-tile 2048 x 2048 matrices on two partitions ran on one of them, with one BLAS
    thread: 3x numpy's time). `min_parallel_cost = 0` partitions every plan. `disabled`: physical rules
    (optimizer/physical_rules/) not to use.
    """
    estimator = Estimator(catalog)
    if workers > 1 and min_parallel_cost > 0 and (estimator.total_cost(plan) < min_parallel_cost or
                                                  _most_tuples(plan, estimator) < workers or
                                                  (threads and _tuple_bound(plan, estimator))):
        workers = 1
    planner = PhysicalPlanner(max(1, workers), estimator, _memory_budget(catalog), disabled)
    root = planner.gather(planner.build(plan, None))
    check_instances(root)
    return root


def _tuple_bound(plan: lp.Plan, estimator: Estimator) -> bool:
    """Whether the plan's kernels do less work than PARALLEL_WORK_PER_TUPLE times its per-tuple cost: many
    small tiles, whose Python (holding the GIL) is most of the time, run faster on one worker."""
    nodes, work, tuples = [plan], 0.0, 0.0
    while nodes:
        current = nodes.pop()
        estimate = estimator.estimate(current)
        work += estimate.work
        tuples += estimate.rows
        nodes.extend(current.inputs)
    return work < PARALLEL_WORK_PER_TUPLE * TUPLE_COST_FLOPS * tuples


def _most_tuples(plan: lp.Plan, estimator: Estimator) -> float:
    """The most tuples any operator of the plan is expected to put out."""
    return max([estimator.estimate(plan).rows] + [_most_tuples(child, estimator) for child in plan.inputs])


def check_instances(node: PhysicalNode) -> None:
    """Every operator reads each partition of its inputs exactly once: an input that is not an exchange
    has as many instances as the operator (one fewer would leave a partition unread, one more reread)."""
    for child in node.children:
        if node.exchange is None and child.instances != node.instances:
            raise InternalError(f"physical plan: {node.operator} has {node.instances} instance(s) but its "
                                f"input {child.operator} has {child.instances}")
        check_instances(child)


def _memory_budget(catalog) -> float:
    """The bytes operators of the catalog's database may hold (its memory manager's budget)."""
    database = getattr(catalog, "db", None)
    return float(database.file.memory.budget) if database is not None else math.inf


def _node(spec: po.OperatorSpec, detail: str, children: tuple, schema, partitioning: Partitioning,
          estimate: Estimate, spill: float = 0.0, read_cost: float = 0.0) -> PhysicalNode:
    node = PhysicalNode(spec, detail, children, schema, partitioning, estimate, spill=spill, read_cost=read_cost)
    own = node.moved_bytes + (spill * SPILL_BYTE_COST + read_cost) / EXCHANGE_BYTE_COST
    return replace(node, cost=sum(c.cost for c in children) + own)


def _spread_keys(tensor, keys: tuple[int, ...]) -> tuple[int, ...]:
    """The keys a scan that nothing above constrains is hashed on: those along which the tensor has more
    than one tile (a key with one value spreads nothing), so that X of one column of tiles is hashed on
    its row key alone, as the aggregates and joins over it ask (a Ray actor then keeps one copy of it)."""
    return tuple(k for k in keys if tensor.grid[k] > 1) or keys


def _names(schema, positions) -> str:
    return ", ".join(schema[p].name for p in positions)


class PhysicalPlanner:
    def __init__(self, workers: int, estimator: Estimator, memory_budget: float = math.inf,
                 disabled: frozenset = frozenset()):
        self.workers = workers
        self.disabled = disabled  # physical rules not to use
        self.estimator = estimator
        self.memory_share = memory_budget / max(1, workers)  # the operators of all workers run at once
        self.memory_budget = memory_budget
        self._memo: dict[tuple, tuple[lp.Plan, list[PhysicalNode]]] = {}
        self._sizes: dict[int, tuple[PhysicalNode, int]] = {}
        self._in_band = False  # planning the bands of a banded aggregate (optimizer/banded_aggregate.py)
        self._key_slots: dict = {}  # group_sizes' memo: each subplan's key slots derived once per plan

    def build(self, plan: lp.Plan, want: Want) -> PhysicalNode:
        """The cheapest physical node for `plan`; `want` names columns the parent would like it hashed on."""
        return min(self.candidates(plan, want), key=lambda n: (n.cost, not _satisfies(n.partitioning, want),
                                                               self._size(n)))

    def _size(self, node: PhysicalNode) -> int:
        """Operators in the tree under `node` (memoized: recounting every candidate would be quadratic)."""
        cached = self._sizes.get(id(node))
        if cached is None or cached[0] is not node:
            cached = (node, 1 + sum(self._size(c) for c in node.children))
            self._sizes[id(node)] = cached
        return cached[1]

    def spill(self, state: PhysicalNode, spilled: float, instances: int) -> float:
        """Expected bytes an operator writes to spill files (and reads back once): `spilled` bytes in all, when
        the state it holds (the estimated output of node `state`, spread over `instances`) exceeds its share."""
        held = state.estimate.bytes / max(1, instances) if state.partitioning.kind != "replicated" \
            else state.estimate.bytes
        return float(spilled) if held > self.memory_share else 0.0

    def read_cost(self, nbytes: float) -> float:
        """The cost of one read of a stored tensor of `nbytes`: from DuckDB, decoded, when it streams (it is
        larger than half the budget, as the buffer pool decides); from the buffer pool when it is cached
        there (then only its first read costs as much, the same in every plan, so it is not counted)."""
        streams = nbytes > self.memory_budget / 2
        return nbytes * (SCAN_BYTE_COST if streams else CACHED_SCAN_BYTE_COST)

    def candidates(self, plan: lp.Plan, want: Want) -> list[PhysicalNode]:
        """Alternative plans (join strategies) kept apart until an operator above can tell which is cheaper."""
        key = (id(plan), want)
        cached = self._memo.get(key)
        if cached is None or cached[0] is not plan:  # memoized: join alternatives would otherwise multiply
            found = lp.handler(self, plan)(plan, want)
            cached = (plan, found if isinstance(found, list) else [found])
            self._memo[key] = cached
        return cached[1]

    # ------------------------------------------------------------ exchanges

    def gather(self, node: PhysicalNode) -> PhysicalNode:
        if node.partitioning.kind == "single":
            return node
        return _node(po.Gather(), f"{node.instances} -> 1", (node,), node.schema, SINGLE, node.estimate)

    def repartition(self, node: PhysicalNode, columns: tuple[int, ...]) -> PhysicalNode:
        if node.partitioning == Partitioning("hash", self.workers, columns):
            return node
        detail = f"hash: {_names(node.schema, columns)}, {self.workers}"
        return _node(po.Repartition(columns), detail, (node,), node.schema, Partitioning("hash", self.workers, columns),
                     node.estimate)

    def broadcast(self, node: PhysicalNode) -> PhysicalNode:
        return _node(po.Broadcast(), str(self.workers), (node,), node.schema,
                     Partitioning("replicated", self.workers), node.estimate)

    # ------------------------------------------------------------ leaves

    def _TensorScan(self, plan: lp.TensorScan, want: Want) -> PhysicalNode:
        keys = tuple(range(len(plan.tensor.keys)))
        estimate = self.estimator.estimate(plan)
        tiles = f"{plan.tensor.name}, tile {list(plan.tensor.tile)}"
        reads = self.read_cost(estimate.bytes)
        if self.workers == 1 or not keys:
            return _node(po.TensorScan(plan.tensor), tiles, (), plan.schema, SINGLE, estimate, read_cost=reads)
        columns = want if self._spreads(estimate, want, keys) else _spread_keys(plan.tensor, keys)
        detail = f"{tiles}, hash: {_names(plan.schema, columns)}"
        return _node(po.TensorScan(plan.tensor, self.workers, columns), detail, (), plan.schema,
                     Partitioning("hash", self.workers, columns), estimate, read_cost=reads)

    def _DenseEinsum(self, plan: lp.DenseEinsum, want: Want) -> PhysicalNode:
        """One instance: its kernel is one call, which BLAS's threads share; split, one call per row block
        (whole row tiles, BLOCKS_PER_THREAD a thread) on as many threads as there are workers, one BLAS
        thread each, each thread taking the next block when it is done with one."""
        estimate = self.estimator.estimate(plan)
        tile = tuple(plan.schema[-1].type.tile)
        threads = min(self.workers, plan.grid[0]) if plan.split else 1
        block_rows = block_rows_of(plan.grid[0], tile[0], threads * BLOCKS_PER_THREAD) if threads > 1 else 0
        blocks = -(-plan.schema[-1].type.extent[0] // block_rows) if block_rows else 1
        kernel = render(plan.kernel, [t.name for t in plan.tensors])
        detail = f"{kernel} on whole arrays" + \
                 (f" in {blocks} row blocks on {threads} threads" if threads > 1 else "") + f", tile {list(tile)}" + \
                 (f", each {render(plan.epilogue, ['tile'])}" if plan.epilogue is not None else "")
        reads = sum(self.read_cost(math.prod(t.shape) * t.dtype.itemsize) for t in plan.tensors)
        assemblers = min(self.workers, len(plan.tensors))  # the memory-bound copies of tiles into whole arrays
        spec = po.DenseEinsum(plan.tensors, plan.kernel, tile, threads, block_rows, plan.epilogue, assemblers)
        return _node(spec, detail, (), plan.schema, SINGLE, estimate, read_cost=reads)

    def _spreads(self, estimate: Estimate, want: Want, keys: tuple[int, ...]) -> bool:
        """Whether hashing a leaf on the key columns `want` keeps every worker busy: enough distinct values."""
        if not want or not all(c in keys for c in want):
            return False
        values = math.prod(estimate.distinct[c] or math.inf for c in want)
        return values >= self.workers

    def _RowsScan(self, plan: lp.RowsScan, want: Want) -> PhysicalNode:
        keys = tuple(i for i, c in enumerate(plan.schema) if c.is_key)
        estimate = self.estimator.estimate(plan)
        if self.workers == 1 or not keys:
            return _node(po.RowsScan(plan.rows), f"{len(plan.rows)} shared tuples", (), plan.schema, SINGLE, estimate)
        columns = want if self._spreads(estimate, want, keys) else keys
        # a column whose tuples all hold one value spreads nothing: hashing on the others satisfies the same
        # parents (a subset of their keys) and matches inputs hashed without it (an exchange fewer)
        columns = tuple(c for c in columns if estimate.distinct[c] != 1) or columns
        return _node(po.RowsScan(plan.rows, self.workers, columns),
                     f"{len(plan.rows)} shared tuples, hash: {_names(plan.schema, columns)}", (),
                     plan.schema, Partitioning("hash", self.workers, columns), estimate)

    def _TableScan(self, plan: lp.TableScan, want: Want) -> PhysicalNode:
        return _node(po.TableScan(plan.table, plan.columns), plan.table, (), plan.schema, SINGLE,
                     self.estimator.estimate(plan))

    # ------------------------------------------------------------ per-tuple operators

    def _Filter(self, plan: lp.Filter, want: Want) -> list[PhysicalNode]:
        names = column_names(plan.input.schema)
        detail = band_text(plan.predicate, names) or render(plan.predicate, names)
        return [_node(po.Filter(plan.predicate), detail, (child,), plan.schema, child.partitioning,
                      self.estimator.estimate(plan))
                for child in self.candidates(plan.input, want)]

    def _Project(self, plan: lp.Project, want: Want) -> list[PhysicalNode]:
        sources = {i: e.index for i, e in enumerate(plan.exprs) if isinstance(e, bx.ColumnIndex)}
        child_want = tuple(sources[c] for c in want) if want and all(c in sources for c in want) else None
        return [self._project_node(plan, child, sources) for child in self.candidates(plan.input, child_want)]

    def _project_node(self, plan: lp.Project, child: PhysicalNode, sources: dict[int, int]) -> PhysicalNode:
        partitioning = child.partitioning
        if partitioning.kind == "hash":
            outputs = {v: k for k, v in sorted(sources.items(), reverse=True)}
            mapped = tuple(outputs[c] if c in outputs else self._equal_output(plan.input, c, outputs)
                           for c in partitioning.columns)
            partitioning = replace(partitioning, columns=mapped) if None not in mapped else \
                Partitioning("any", partitioning.count)
        detail = assignments(plan.exprs, plan.schema, plan.input.schema)
        return _node(po.Project(plan.exprs), detail, (child,), plan.schema, partitioning,
                     self.estimator.estimate(plan))

    def _equal_output(self, source: lp.Plan, column: int, outputs: dict[int, int]) -> Optional[int]:
        """The output column of a projection that holds the same key as its input `column`, which it drops
        (a key an inner join made equal to it, a lineage copy of it: the same key slot, so the same values
        in every tuple); None when none does."""
        slots = key_slots(source, self._key_slots)
        if slots is None or column not in slots.at:
            return None
        slot = slots.at[column]
        return next((outputs[c] for c in sorted(slots.at) if slots.at[c] == slot and c in outputs), None)

    # ------------------------------------------------------------ join

    def _Join(self, plan: lp.Join, want: Want) -> list[PhysicalNode]:
        if self.workers == 1:
            left, right = self.build(plan.left, None), self.build(plan.right, None)
            left, right = self.gather(left), self.gather(right)
            return [self.join_node(plan, left, right, SINGLE)]
        found = [node for rule in JOIN_RULES if rule.__name__ not in self.disabled
                 and (node := rule(self, plan, want)) is not None]
        return found or [self._join_in_one_place(plan)]

    def _join_in_one_place(self, plan: lp.Join) -> PhysicalNode:
        """Both inputs gathered and joined in one partition: where no physical rule places the join."""
        left, right = self.gather(self.build(plan.left, None)), self.gather(self.build(plan.right, None))
        return self.join_node(plan, left, right, SINGLE)

    def join_node(self, plan: lp.Join, left: PhysicalNode, right: PhysicalNode,
                   partitioning: Partitioning) -> PhysicalNode:
        detail = f"{plan.kind}: " + (", ".join(f"{plan.left.schema[l].name} = {plan.right.schema[r].name}"
                                               for l, r in zip(plan.left_keys, plan.right_keys)) or "cross")
        spec = po.HashJoin(plan.kind, plan.left_keys, plan.right_keys, plan.left.schema, plan.right.schema,
                           plan.residual)
        # a build side that does not fit: both inputs go to partition files (a grace hash join)
        spill = self.spill(right, left.estimate.bytes + right.estimate.bytes, partitioning.count)
        return _node(spec, detail, (left, right), plan.schema, partitioning, self.estimator.estimate(plan), spill)

    def single_to_many(self, node: PhysicalNode) -> PhysicalNode:
        """A single-instance input spread over the workers (by a hash of its key columns)."""
        if node.partitioning.kind != "single":
            return node
        keys = tuple(i for i, c in enumerate(node.schema) if c.is_key)
        return self.repartition(node, keys) if keys else node

    # ------------------------------------------------------------ aggregation

    def _Aggregate(self, plan: lp.Aggregate, want: Want) -> list[PhysicalNode]:
        groups = tuple(e.index for e in plan.group_by if isinstance(e, bx.ColumnIndex))
        simple = len(groups) == len(plan.group_by)
        found = [self._aggregate_over(plan, child, groups, simple)
                 for child in self.candidates(plan.input, groups if simple and groups else None)]
        if self._in_band or "banded_aggregate" in self.disabled:  # a band's own aggregate is not cut again
            return found
        self._in_band = True
        try:
            bands = banded_aggregate(self, plan, want)
        finally:
            self._in_band = False
        return found if bands is None else found + [bands]

    def _aggregate_over(self, plan: lp.Aggregate, child: PhysicalNode, groups: tuple[int, ...],
                        simple: bool) -> PhysicalNode:
        part = child.partitioning
        if part.kind == "single":
            return self.aggregate_node(plan, child, SINGLE)
        if simple and groups and part.kind == "hash" and all(c in groups for c in part.columns):
            out = tuple(groups.index(c) for c in part.columns)
            return self.aggregate_node(plan, child, Partitioning("hash", part.count, out))
        estimate = self.estimator.estimate(plan)
        fewer = not plan.group_by or estimate.rows * self.workers < child.estimate.rows  # partial results move fewer
        if "two_phase_aggregate" not in self.disabled and splittable(plan) and fewer:
            return two_phase_aggregate(self, plan, child, estimate)
        if not (simple and groups):
            return self.aggregate_node(plan, self.gather(child), SINGLE)
        moved = self.repartition(child, groups)
        return self.aggregate_node(plan, moved, Partitioning("hash", self.workers, tuple(range(len(groups)))))

    def aggregate_node(self, plan: lp.Aggregate, child: PhysicalNode, partitioning: Partitioning,
                        phase: str = "") -> PhysicalNode:
        inputs = column_names(plan.input.schema)
        group_rows = rows_per_group(plan, self._key_slots) if not phase else None  # a partial aggregate sees part of a group
        complete = f" (complete at {group_rows} tuples)" if group_rows is not None else ""
        detail = f"{phase}group by [{_names(plan.schema, range(len(plan.group_by)))}]{complete}: " + \
            ", ".join(f"{c.function}({render(c.arg, inputs) if c.arg is not None else '*'})" for c in plan.calls)
        estimate = self.estimator.estimate(plan)
        spec = po.HashAggregate(plan.group_by, plan.calls, plan.schema, phase.startswith("partial"), group_rows)
        groups = PhysicalNode(spec, detail, (), plan.schema, partitioning, estimate)
        # groups that do not fit: partial sums spill, about one per input tuple at worst, each a group's size
        spill = self.spill(groups, child.estimate.rows * estimate.bytes / max(1.0, estimate.rows), partitioning.count)
        return _node(spec, detail, (child,), plan.schema, partitioning, estimate, spill)

    # ------------------------------------------------------------ the rest

    def _Retile(self, plan: lp.Retile, want: Want) -> PhysicalNode:
        """Every instance sees every input tile (a new tile may draw on several) and cuts its own new
        tiles; with one worker the input is gathered."""
        source = plan.input.schema[-1].type
        keys, value = sum(c.is_key for c in plan.input.schema), plan.schema[-1].type
        count = self.workers
        if count == 1:
            child, partitioning = self.gather(self.build(plan.input, None)), SINGLE
        else:
            child = self.broadcast(self.build(plan.input, None))
            partitioning = Partitioning("hash", count, tuple(range(len(plan.tile))))
        spec = po.Retile(keys, source.tile, plan.tile, value.extent, value.dtype, count)
        spill = self.spill(child, child.estimate.bytes, count)  # it holds its input until it has read it all
        return _node(spec, f"{list(source.tile)} -> {list(plan.tile)}", (child,), plan.schema, partitioning,
                     self.estimator.estimate(plan), spill)

    def _UnionAll(self, plan: lp.UnionAll, want: Want) -> PhysicalNode:
        return self.union_all(plan, want)

    def union_all(self, plan: lp.UnionAll, want: Want) -> PhysicalNode:
        parts = [self.build(p, None) for p in plan.parts]
        if any(p.partitioning.kind == "single" for p in parts):
            parts = [self.gather(p) for p in parts]
            partitioning = SINGLE
        else:
            partitioning = Partitioning("any", self.workers)
        return _node(po.UnionAll(), "", tuple(parts), plan.schema, partitioning, self.estimator.estimate(plan))

    def _Sort(self, plan: lp.Sort, want: Want) -> PhysicalNode:
        child = self.gather(self.build(plan.input, None))
        positions = tuple(k.index for k in plan.keys)
        detail = ", ".join(f"{plan.schema[p].name}{' DESC' if d else ''}" for p, d in zip(positions, plan.descending))
        spill = self.spill(child, child.estimate.bytes, 1)  # sorted runs, merged
        return _node(po.Sort(positions, plan.descending), detail, (child,), plan.schema, SINGLE,
                     self.estimator.estimate(plan), spill)

    def _Limit(self, plan: lp.Limit, want: Want) -> PhysicalNode:
        child = self.gather(self.build(plan.input, None))
        detail = f"{plan.limit}" + (f", offset {plan.offset}" if plan.offset else "")
        return _node(po.Limit(plan.limit, plan.offset), detail, (child,), plan.schema, SINGLE,
                     self.estimator.estimate(plan))


def block_rows_of(row_tiles: int, tile_rows: int, blocks: int) -> int:
    """The rows of each of at most `blocks` runs of whole row tiles over `row_tiles` tiles, as even as they go."""
    return -(-row_tiles // max(1, min(blocks, row_tiles))) * tile_rows


def _satisfies(partitioning: Partitioning, want: Want) -> bool:
    return bool(want) and partitioning.kind == "hash" and all(c in want for c in partitioning.columns)
