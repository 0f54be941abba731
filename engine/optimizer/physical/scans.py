"""The leaves: scans of stored tensors, of shared tuples and of tables, one constant tuple, and products run on
whole arrays."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from trdb.optimizer.physical.nodes import Want, names_of, physical_node, read_cost
from trdb.plan import logical as lp
from trdb.plan import physical_operators as po
from trdb.plan.estimates import Estimate
from trdb.plan.physical import SINGLE, Partitioning, PhysicalNode
from trdb.planner.expression_text import render

if TYPE_CHECKING:
    from trdb.optimizer.physical_planner import PhysicalPlanner

# a split DenseEinsum's row blocks a thread takes on average: a thread slowed by other work on its core
# takes fewer of them, and the threads end together (optimizer/rules/dense_products.py)
BLOCKS_PER_THREAD = 4


def tensor_scan(planner: "PhysicalPlanner", plan: lp.TensorScan, want: Want) -> PhysicalNode:
    """A stored tensor read by each worker's share of its keys (hashed on `want` where that spreads)."""
    keys = tuple(range(len(plan.tensor.keys)))
    estimate = planner.estimator.estimate(plan)
    tiles = f"{plan.tensor.name}, tile {list(plan.tensor.tile)}"
    reads = read_cost(planner, estimate.bytes)
    if planner.workers == 1 or not keys:
        return physical_node(po.TensorScan(plan.tensor), tiles, (), plan.schema, SINGLE, estimate, read_cost=reads)
    columns = want if _spreads(planner, estimate, want, keys) else _spread_keys(plan.tensor, keys)
    detail = f"{tiles}, hash: {names_of(plan.schema, columns)}"
    return physical_node(po.TensorScan(plan.tensor, planner.workers, columns), detail, (), plan.schema,
                         Partitioning("hash", planner.workers, columns), estimate, read_cost=reads)


def dense_einsum(planner: "PhysicalPlanner", plan: lp.DenseEinsum, want: Want) -> PhysicalNode:
    """One instance: its kernel is one call, which BLAS's threads share; split, one call per row block
    (whole row tiles, BLOCKS_PER_THREAD a thread) on as many threads as there are workers, one BLAS
    thread each, each thread taking the next block when it is done with one."""
    estimate = planner.estimator.estimate(plan)
    tile = tuple(plan.schema[-1].type.tile)
    threads = min(planner.workers, plan.grid[0]) if plan.split else 1
    block_rows = block_rows_of(plan.grid[0], tile[0], threads * BLOCKS_PER_THREAD) if threads > 1 else 0
    blocks = -(-plan.schema[-1].type.extent[0] // block_rows) if block_rows else 1
    kernel = render(plan.kernel, [t.name for t in plan.tensors])
    detail = f"{kernel} on whole arrays" + \
             (f" in {blocks} row blocks on {threads} threads" if threads > 1 else "") + f", tile {list(tile)}" + \
             (f", each {render(plan.epilogue, ['tile'])}" if plan.epilogue is not None else "")
    reads = sum(read_cost(planner, math.prod(t.shape) * t.dtype.itemsize) for t in plan.tensors)
    assemblers = min(planner.workers, len(plan.tensors))  # the memory-bound copies of tiles into whole arrays
    spec = po.DenseEinsum(plan.tensors, plan.kernel, tile, threads, block_rows, plan.epilogue, assemblers)
    return physical_node(spec, detail, (), plan.schema, SINGLE, estimate, read_cost=reads)


def block_rows_of(row_tiles: int, tile_rows: int, blocks: int) -> int:
    """The rows of each of at most `blocks` runs of whole row tiles over `row_tiles` tiles, as even as they go."""
    return -(-row_tiles // max(1, min(blocks, row_tiles))) * tile_rows


def one_row(planner: "PhysicalPlanner", plan: lp.OneRow, want: Want) -> PhysicalNode:
    """One tuple of no columns, in one place."""
    return physical_node(po.OneRow(), "one tuple", (), plan.schema, SINGLE, planner.estimator.estimate(plan))


def rows_scan(planner: "PhysicalPlanner", plan: lp.RowsScan, want: Want) -> PhysicalNode:
    """A shared subplan's tuples, computed already, read by each worker's share of their keys."""
    keys = tuple(i for i, c in enumerate(plan.schema) if c.is_key)
    estimate = planner.estimator.estimate(plan)
    if planner.workers == 1 or not keys:
        return physical_node(po.RowsScan(plan.rows), f"{len(plan.rows)} shared tuples", (), plan.schema, SINGLE,
                             estimate)
    columns = want if _spreads(planner, estimate, want, keys) else keys
    # a column whose tuples all hold one value spreads nothing: hashing on the others satisfies the same
    # parents (a subset of their keys) and matches inputs hashed without it (an exchange fewer)
    columns = tuple(c for c in columns if estimate.distinct[c] != 1) or columns
    return physical_node(po.RowsScan(plan.rows, planner.workers, columns),
                         f"{len(plan.rows)} shared tuples, hash: {names_of(plan.schema, columns)}", (),
                         plan.schema, Partitioning("hash", planner.workers, columns), estimate)


def table_scan(planner: "PhysicalPlanner", plan: lp.TableScan, want: Want) -> PhysicalNode:
    """A plain table's rows, read in one place."""
    return physical_node(po.TableScan(plan.table, plan.columns), plan.table, (), plan.schema, SINGLE,
                         planner.estimator.estimate(plan))


def _spreads(planner: "PhysicalPlanner", estimate: Estimate, want: Want, keys: tuple[int, ...]) -> bool:
    """Whether hashing a leaf on the key columns `want` keeps every worker busy: enough distinct values."""
    if not want or not all(c in keys for c in want):
        return False
    values = math.prod(estimate.distinct[c] or math.inf for c in want)
    return values >= planner.workers


def _spread_keys(tensor, keys: tuple[int, ...]) -> tuple[int, ...]:
    """The keys a scan that nothing above constrains is hashed on: those along which the tensor has more
    than one tile (a key with one value spreads nothing), so that X of one column of tiles is hashed on
    its row key alone, as the aggregates and joins over it ask (a Ray actor then keeps one copy of it)."""
    return tuple(k for k in keys if tensor.grid[k] > 1) or keys
