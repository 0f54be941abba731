"""Whether a product of stored tensors runs as one whole-array product (a DenseEinsum): decided here alone.

Decomposed, an EINSUM pays for every tuple it joins and sums (a hash probe, a kernel call, an
accumulator): at a few MB of operands that is as much as the arithmetic (the chain 'ij,jk,kl->il'
of 4096 x 64 float32 operands in 1024-row tiles spent 0.49 of its 0.9 ms outside its kernels).
When every operand is a stored tensor scanned whole, with all of its tiles present (so no tile
can be skipped as zero), and the operands, the largest intermediate and the result together fit
in `dense_limit` bytes (the setting dense_einsum_bytes), the product of two or more operands runs
once on each operand as one array (kept per data version in the buffer pool beside its tiles; an
operand of one tile is that tile), in opt_einsum's order, and its result is cut into the result's
tiles. BLAS's threads are then its parallelism, as in numpy. (One operand, a transpose or a sum,
is one kernel call per tile already.)

`whole_product` is that choice, for both of its callers: the pipeline's expansion of an EINSUM
(pipeline/expansions.py) and the rule that finds a matrix product written as a join and a SUM of tile
products (optimizer/rules/dense_products.py). Neither chooses it under a GRAD or for MINIMIZE (autodiff
differentiates the decomposed plan, whose forward pass it shares with the loss), nor for the Ray
executor (`dense_limit` is 0: its actors read partitions, not whole tensors). Beside tile products
(`beside_tile_products`) a whole product slows them, so the expansion then decomposes every EINSUM
and the rule runs its matrix product in row blocks.
"""
from __future__ import annotations

import functools
import math
from typing import Optional, Sequence

import opt_einsum

from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.types import TensorType
from trdb.planner.kernel_calls import call
from trdb.storage.tensor_meta import TensorMeta

_BLAS_KERNELS = ("MATMUL", "EINSUM")
BUDGET_SHARE = 8  # at most this part of the memory budget (the whole arrays are copies of the tiles)


def dense_limit(settings, catalog) -> int:
    """The most bytes a DenseEinsum may hold for a statement under `settings` (0: none is chosen).
    The setting dense_einsum_bytes (512 MB): one product on BLAS's threads stays ahead of tile products on
    the workers well past where per-tuple costs stop mattering (64 MB): n = 4096 (256 MB held) 1.06x numpy
    tiled, 1.00x whole."""
    if settings.executor != "local":
        return 0
    return min(settings.dense_einsum_bytes, catalog.db.file.memory.budget // BUDGET_SHARE)


def whole_product(operands: Sequence[lp.Plan], spec: str, schema, limit: int) -> Optional[lp.DenseEinsum]:
    """EINSUM(spec) of `operands`, output `schema`, as one DenseEinsum; None where it runs as tile products:
    fewer than two operands, one that is not a stored tensor scanned whole, with every tile present and
    dense, a kernel whose result is not the whole of the schema's value, or more than `limit` bytes held."""
    if limit <= 0 or len(operands) < 2 or not all(isinstance(p, lp.TensorScan) for p in operands):
        return None
    tensors = tuple(p.tensor for p in operands)
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


def beside_tile_products(plan: lp.Plan) -> bool:
    """Whether `plan` holds a DenseEinsum and a node that calls a BLAS kernel on tiles (`_multiplies_tiles`)."""
    return any(isinstance(node, lp.DenseEinsum) for node in _plan_nodes(plan)) and _multiplies_tiles(plan)


def _multiplies_tiles(plan: lp.Plan) -> bool:
    """Whether a node of `plan` calls a BLAS kernel on tiles (a DenseEinsum's whole arrays aside). A whole
    product beside such calls slows them: OpenBLAS's threads spin for ~0.1 s after it, and tile products on
    the workers' single BLAS threads meanwhile run ~1.5x slower (optimizer/rules/dense_products.py); an
    EINSUM on whole arrays then joined with a tiled product took 1.4x as long as both tiled."""
    return any(any(_calls_blas(expr) for expr in _expressions(node)) for node in _plan_nodes(plan))


def _plan_nodes(plan: lp.Plan) -> list[lp.Plan]:
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
