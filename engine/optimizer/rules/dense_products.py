"""dense_products: a matrix product of two whole dense stored tensors, written as a join and a SUM, runs as one
DenseEinsum.

`SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j` is EINSUM('ij,jk->ik',
A, B) in A's row tiles and B's column tiles. Tile by tile, each worker multiplies its tiles on one BLAS thread
and the aggregate adds the products up: 8192 x 1024 times 1024 x 1024 in 1024 x 512 and 512 x 512 tiles took
68-70 ms against numpy's 58-61 on the whole arrays (one large product on BLAS's two threads, which share its
packed panels). Under the conditions of an EINSUM's DenseEinsum (optimizer/dense_einsum.py: every tile present
and dense, the arrays within dense_einsum_bytes, the local executor) it runs on the whole matrices instead, kept
per data version in the buffer pool, and is cut into the same tiles under the same keys.

The tiles must line up as the products need them (A's column tile is B's row tile, A's columns B's rows), so
that what runs whole is what would have run tile by tile; the sums may round differently, as any other
order of the same products may.

Only where no tile product runs beside it: BLAS's threads keep spinning for a while after a whole product,
and products run tile by tile on the workers' single BLAS threads meanwhile run ~1.5x slower (tile products
after a whole 8192 x 1024 x 1024 one: 94-99 ms against 61 ms after a pause). So not in a plan that also
multiplies tiles (a product of a product computed tile by tile), nor in one that other plans read (a
gradient's forward pass, whose backward pass multiplies tiles: the MLP's GRAD(loss, W1) in 1024 x 512 tiles
took 1.38x numpy's time with its forward product whole, 1.15x tiled).
"""
from __future__ import annotations

from typing import Optional

from trdb.optimizer.dense_einsum import dense_limit, multiplies_tiles, whole_einsum
from trdb.optimizer.plan_rewrite import transform_up
from trdb.planner import expressions as bx
from trdb.planner import logical as lp
from trdb.storage.tensor_meta import TensorMeta

PRODUCT = "ij,jk->ik"


def dense_products(plan: lp.Plan, context) -> lp.Plan:
    """Every SUM of tile products over a join of two stored matrices that qualifies, as a DenseEinsum."""
    if context.catalog is None or context.settings is None:
        return plan
    limit = dense_limit(context.settings, context.catalog.db.file.memory.budget)
    if limit <= 0 or context.keep_zero_tuples:  # its tuples read by other plans (or written): see above
        return plan
    dense = transform_up(plan, lambda node: _as_dense(node, limit))
    return plan if dense is plan or multiplies_tiles(dense) else dense


def _as_dense(node: lp.Plan, limit: int) -> lp.Plan:
    operands = _product_operands(node)
    if operands is None:
        return node
    first, second = operands
    if first.tile[1] != second.tile[0] or first.shape[1] != second.shape[0]:
        return node  # tile products that would not fit: the tiled plan reports them
    if tuple(node.schema[-1].type.tile) != (first.tile[0], second.tile[1]):
        return node
    return whole_einsum((first, second), PRODUCT, node.schema, limit) or node


def _product_operands(node: lp.Plan) -> Optional[tuple[TensorMeta, TensorMeta]]:
    """(A, B) when `node` is SUM(MATMUL(A.v, B.v)) grouped by A's row key and B's column key over an inner
    join of scans of the stored matrices A and B (either side) on A's column key = B's row key; else None."""
    if not isinstance(node, lp.Aggregate) or len(node.group_by) != 2 or len(node.calls) != 1:
        return None
    join, (total,) = node.input, node.calls
    if not (isinstance(join, lp.Join) and join.kind == "INNER" and join.residual is None and len(join.left_keys) == 1
            and isinstance(join.left, lp.TensorScan) and isinstance(join.right, lp.TensorScan)):
        return None
    product = total.arg
    if total.function != "SUM" or not isinstance(product, bx.Call) or product.function.name != "MATMUL":
        return None
    columns = [*product.args, *node.group_by]
    if not all(isinstance(c, bx.ColumnIndex) for c in columns):
        return None
    sides = {_value_column(scan, offset): (scan.tensor, offset, key)
             for scan, offset, key in ((join.left, 0, join.left_keys[0]),
                                       (join.right, len(join.left.schema), join.right_keys[0]))}
    first, second = (sides.get(arg.index) for arg in product.args)
    if first is None or second is None or first[1] == second[1]:
        return None
    (a, a_offset, a_joined), (b, b_offset, b_joined) = first, second
    if a_joined != 1 or b_joined != 0:
        return None  # not A's columns against B's rows
    if [c.index for c in node.group_by] != [a_offset, b_offset + 1]:
        return None  # the result's keys in another order: not the product's tiles
    return a, b


def _value_column(scan: lp.TensorScan, offset: int) -> Optional[int]:
    """The joined tuple's position of a 2-d stored tensor's tile (after its two keys), or None."""
    if len(scan.tensor.shape) != 2 or len(scan.schema) != 3 or scan.schema[2].is_key:
        return None
    return offset + 2
