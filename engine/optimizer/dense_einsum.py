"""An EINSUM of small dense stored tensors run as one kernel call on whole arrays (a DenseEinsum).

Decomposed, an EINSUM pays for every tuple it joins and sums (a hash probe, a kernel call, an
accumulator): at a few MB of operands that is as much as the arithmetic (the chain 'ij,jk,kl->il'
of 4096 x 64 float32 operands in 1024-row tiles spent 0.49 of its 0.9 ms outside its kernels).
When every operand is a stored tensor scanned whole, with all of its tiles present (so no tile
can be skipped as zero), and the operands, the largest intermediate and the result together fit
in `dense_limit` bytes (the setting dense_einsum_bytes), the EINSUM of two or more operands runs
once on each operand as one array (kept per data version in the buffer pool beside its tiles; an
operand of one tile is that tile), in opt_einsum's order, and its result is cut into the result's
tiles. BLAS's threads are then its parallelism, as in numpy. (One operand, a transpose or a sum,
is one kernel call per tile already.)

Not chosen under a GRAD or for MINIMIZE (autodiff differentiates the decomposed plan, whose forward
pass it shares with the loss), nor for the Ray executor (its actors read partitions, not whole tensors),
nor in a statement that also multiplies tiles (`multiplies_tiles`: pipeline/expansions.py then
decomposes every EINSUM).
"""
from __future__ import annotations

import functools
import math
from typing import Optional

import opt_einsum

from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.types import TensorType
from trdb.planner.kernel_calls import call
from trdb.storage.tensor_meta import TensorMeta

_BLAS_KERNELS = ("MATMUL", "EINSUM")
BUDGET_SHARE = 8  # at most this part of the memory budget (the whole arrays are copies of the tiles)


def dense_limit(settings, memory_budget: int) -> int:
    """The most bytes a DenseEinsum may hold for a statement under `settings` (0: none is chosen).
    The setting dense_einsum_bytes (512 MB): one product on BLAS's threads stays ahead of tile products on
    the workers well past where per-tuple costs stop mattering (64 MB): n = 4096 (256 MB held) 1.06x numpy
    tiled, 1.00x whole."""
    if settings.executor != "local":
        return 0
    return min(settings.dense_einsum_bytes, memory_budget // BUDGET_SHARE)


def dense_einsum(node: lp.Einsum, limit: int) -> Optional[lp.DenseEinsum]:
    """`node` as one DenseEinsum, when its operands qualify (see the module's docstring); else None."""
    if limit <= 0 or not all(isinstance(p, lp.TensorScan) for p in node.operands):
        return None
    tensors = tuple(p.tensor for p in node.operands)
    if len(tensors) < 2:
        return None  # one operand (a transpose, a sum): one kernel call per tile already
    return whole_einsum(tensors, node.spec.spec, node.schema, limit)


def whole_einsum(tensors: tuple[TensorMeta, ...], spec: str, schema, limit: int) -> Optional[lp.DenseEinsum]:
    """EINSUM(spec) of the stored `tensors`, output `schema`, as one DenseEinsum: when each has every tile
    present and dense, the kernel's result is the whole of the schema's value, and what it holds fits `limit`."""
    if not all(_whole_and_dense(t) for t in tensors):
        return None
    value = schema[-1].type
    args = [bx.ColumnIndex(i, TensorType(t.dtype, t.shape, t.shape)) for i, t in enumerate(tensors)]
    kernel = call("EINSUM", spec, *args)
    if kernel.type.dtype != value.dtype or tuple(kernel.type.tile) != tuple(value.extent):
        return None
    if _bytes_held(spec, tensors, value) > limit:
        return None
    return lp.DenseEinsum(tensors, kernel, schema)


def _whole_and_dense(meta: TensorMeta) -> bool:
    return not meta.external and meta.csr_tuples == 0 and 0 < meta.tuple_count == meta.max_tuples


def _bytes_held(spec: str, tensors: tuple[TensorMeta, ...], value: TensorType) -> int:
    """The operands, the largest intermediate of opt_einsum's path and the result, in bytes."""
    operands = sum(math.prod(t.shape) * t.dtype.itemsize for t in tensors)
    largest = _largest_intermediate(spec, tuple(tuple(t.shape) for t in tensors))
    return operands + (largest + math.prod(value.extent)) * value.dtype.itemsize


@functools.lru_cache(maxsize=256)
def _largest_intermediate(spec: str, shapes: tuple) -> int:
    _, info = opt_einsum.contract_path(spec, *shapes, shapes=True)
    return int(info.largest_intermediate)


def multiplies_tiles(plan: lp.Plan) -> bool:
    """Whether a node of `plan` calls a BLAS kernel on tiles (a DenseEinsum's whole arrays aside). A whole
    product beside such calls slows them: OpenBLAS's threads spin for ~0.1 s after it, and tile products on
    the workers' single BLAS threads meanwhile run ~1.5x slower (optimizer/rules/dense_products.py)."""
    return any(any(_calls_blas(expr) for expr in _expressions(node)) for node in plan_nodes(plan))


def plan_nodes(plan: lp.Plan) -> list[lp.Plan]:
    """Every node of `plan` once (a subplan read twice, as before sharing, is one node)."""
    seen, stack, nodes = set(), [plan], []
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen.add(id(node))
            nodes.append(node)
            stack.extend(node.inputs)
    return nodes


def _expressions(node: lp.Plan) -> list[bx.Bound]:
    if isinstance(node, lp.Project):
        return list(node.exprs)
    if isinstance(node, lp.Aggregate):
        return [*node.group_by, *(call.arg for call in node.calls if call.arg is not None)]
    if isinstance(node, lp.Filter):
        return [node.predicate]
    if isinstance(node, lp.Join):
        return [node.residual] if node.residual is not None else []
    if isinstance(node, lp.Sort):
        return list(node.keys)
    return []


def _calls_blas(expr: bx.Bound) -> bool:
    if isinstance(expr, bx.Call) and expr.function.name in _BLAS_KERNELS:
        return True
    return any(_calls_blas(child) for child in bx.children(expr))
