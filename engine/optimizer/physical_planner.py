"""Physical planning's driver: each logical operator planned by its family's module, the cheapest kept, the top gathered."""
from __future__ import annotations

import math

from trdb.config.unit_costs import MIN_TUPLES_PER_WORKER, PARALLEL_WORK_PER_TUPLE, TUPLE_COST_FLOPS
from trdb.optimizer.cardinality import Estimator
from trdb.optimizer.physical import aggregates, exchanges, joins, per_tuple, scans
from trdb.optimizer.physical.nodes import Want, memory_budget
from trdb.plan import logical as lp
from trdb.plan.physical import Partitioning, PhysicalNode


def plan_physical(plan: lp.Plan, workers: int = 1, catalog=None, min_parallel_cost: float = 0.0,
                  threads: bool = True, disabled: frozenset = frozenset()) -> PhysicalNode:
    """The physical plan of a logical plan for `workers` partitions, gathered to one at the top.

    A plan estimated to cost less than `min_parallel_cost` runs on one worker, and so does one whose kernels
    do little work for its tuples (`_tuple_bound`) when the workers are `threads` of this process (the local
    executor; Ray's actors are processes), and one where no operator has as many tuples as there
    are workers: partitions could not spread its work, and BLAS's threads share its kernels instead (a
    product of two single-tile 2048 x 2048 matrices on two partitions ran on one of them, with one BLAS
    thread: 3x numpy's time). Worker threads need MIN_TUPLES_PER_WORKER tuples each, else BLAS's threads
    run the plan's few large kernels faster (NNMF's steps: two partitions of two products each were no
    faster than one worker). `min_parallel_cost = 0` partitions every plan. `disabled`: physical rules
    (optimizer/physical_rules/) not to use.
    """
    estimator = Estimator(catalog)
    few = MIN_TUPLES_PER_WORKER * workers if threads else workers
    if workers > 1 and min_parallel_cost > 0 and (estimator.total_cost(plan) < min_parallel_cost or
                                                  _most_tuples(plan, estimator) < few or
                                                  (threads and _tuple_bound(plan, estimator))):
        workers = 1
    planner = PhysicalPlanner(max(1, workers), estimator, memory_budget(catalog), disabled)
    root = planner.gather(planner.build(plan, None))
    exchanges.check_instances(root)
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


class PhysicalPlanner:
    """Plans each logical operator by its family's function (`lp.handler` finds it as `_<Operator>`), keeping
    alternatives apart until an operator above can tell which is cheaper; the physical rules
    (optimizer/physical_rules/) build through the methods it lends them."""

    # each logical operator's planning, (planner, plan, want) -> a node or alternative nodes, by family
    _TensorScan, _RowsScan, _TableScan = scans.tensor_scan, scans.rows_scan, scans.table_scan
    _OneRow = scans.one_row
    _DenseEinsum = scans.dense_einsum
    _Filter, _Project, _UnionAll = per_tuple.filter_rows, per_tuple.project, per_tuple.union_all
    _Join = joins.join
    _Aggregate = aggregates.aggregate
    _Sort, _Limit, _Retile = exchanges.sort, exchanges.limit, exchanges.retile

    # what the families and the physical rules build with
    gather, repartition, broadcast = exchanges.gather, exchanges.repartition, exchanges.broadcast
    single_to_many = exchanges.single_to_many
    join_node, aggregate_node, union_all = joins.join_node, aggregates.aggregate_node, per_tuple.union_all

    def __init__(self, workers: int, estimator: Estimator, memory_budget: float = math.inf,
                 disabled: frozenset = frozenset()):
        self.workers = workers
        self.disabled = disabled  # physical rules not to use
        self.estimator = estimator
        self.memory_share = memory_budget / max(1, workers)  # the operators of all workers run at once
        self.memory_budget = memory_budget
        self._memo: dict[tuple, tuple[lp.Plan, list[PhysicalNode]]] = {}
        self._sizes: dict[int, tuple[PhysicalNode, int]] = {}
        self.in_band = False  # planning the bands of a banded aggregate (optimizer/banded_aggregate.py)
        self.key_slot_memo: dict = {}  # group_sizes' memo: each subplan's key slots derived once per plan

    def build(self, plan: lp.Plan, want: Want) -> PhysicalNode:
        """The cheapest physical node for `plan`; `want` names columns the parent would like it hashed on."""
        return min(self.candidates(plan, want), key=lambda n: (n.cost, not _satisfies(n.partitioning, want),
                                                               self._size(n)))

    def candidates(self, plan: lp.Plan, want: Want) -> list[PhysicalNode]:
        """Alternative plans (join strategies) kept apart until an operator above can tell which is cheaper."""
        key = (id(plan), want)
        cached = self._memo.get(key)
        if cached is None or cached[0] is not plan:  # memoized: join alternatives would otherwise multiply
            found = lp.handler(self, plan)(plan, want)
            cached = (plan, found if isinstance(found, list) else [found])
            self._memo[key] = cached
        return cached[1]

    def _size(self, node: PhysicalNode) -> int:
        """Operators in the tree under `node` (memoized: recounting every candidate would be quadratic)."""
        cached = self._sizes.get(id(node))
        if cached is None or cached[0] is not node:
            cached = (node, 1 + sum(self._size(c) for c in node.children))
            self._sizes[id(node)] = cached
        return cached[1]


def _satisfies(partitioning: Partitioning, want: Want) -> bool:
    """Whether the partitioning is a hash on (a subset of) the wanted columns."""
    return bool(want) and partitioning.kind == "hash" and all(c in want for c in partitioning.columns)
