"""dense_products: a matrix product of two whole dense stored tensors, written as a join and a SUM, runs as one
DenseEinsum.

`SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j` is EINSUM('ij,jk->ik',
A, B) in A's row tiles and B's column tiles. Tile by tile, each worker multiplies its tiles on one BLAS thread
and the aggregate adds the products up: 8192 x 1024 times 1024 x 1024 in 1024 x 512 and 512 x 512 tiles took
68-70 ms against numpy's 58-61 on the whole arrays (one large product on BLAS's two threads, which share its
packed panels). Where optimizer/whole_products.py chooses a whole product for the two scans (as for an EINSUM's
DenseEinsum: every tile present and dense, the arrays within dense_einsum_bytes, the local executor) it runs on
the whole matrices instead, kept per data version in the buffer pool, and is cut into the same tiles under the
same keys.

The tiles must line up as the products need them (A's column tile is B's row tile, A's columns B's rows), so
that what runs whole is what would have run tile by tile; the sums may round differently, as any other
order of the same products may.

Alone, it runs on BLAS's threads. Beside tile products it is split: BLAS's threads keep spinning for a
while after a whole product, and products run tile by tile on the workers' single BLAS threads meanwhile
run ~1.5x slower (tile products after a whole 8192 x 1024 x 1024 one: 94-99 ms against 61 ms after a
pause; the MLP's GRAD(loss, W1) in 1024 x 512 tiles took 1.38x numpy's time with its forward product
whole, 1.15x tiled). So in a plan that also multiplies tiles (a product of a product computed tile by
tile), or whose tuples other plans read (a gradient's forward pass, whose backward pass multiplies tiles),
the product runs in row blocks of whole row tiles (about four a worker, taken in turn by the workers'
threads, so that a thread slowed by other work on its core takes fewer) on one BLAS thread each, as the
tile products do (the same product: 63.7 ms in two row blocks, 68-70 ms in those tiles, 60-61 ms on BLAS's
two threads), and an elementwise kernel of the product alone in the projection above (the hidden layer's
RELU) runs on each block too, not on one thread afterwards. With one worker the plan stays tiled.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from trdb.optimizer.plan_rewrite import transform_up
from trdb.optimizer.whole_products import beside_tile_products, dense_limit, whole_product
from trdb.plan import expressions as bx
from trdb.plan import logical as lp

PRODUCT = "ij,jk->ik"


def dense_products(plan: lp.Plan, context) -> lp.Plan:
    """Every SUM of tile products over a join of two stored matrices that qualifies, as a DenseEinsum: one
    call alone, row blocks on the workers beside tile products or for other plans (see above)."""
    if context.catalog is None or context.settings is None:
        return plan
    limit = dense_limit(context.settings, context.catalog)
    if limit <= 0:
        return plan
    dense = transform_up(plan, lambda node: _as_dense(node, limit, split=False))
    if dense is plan or not (context.keep_zero_tuples or beside_tile_products(dense)):
        return dense
    if context.settings.workers < 2:
        return plan
    return transform_up(plan, lambda node: _with_epilogue(_as_dense(node, limit, split=True)))


def _as_dense(node: lp.Plan, limit: int, split: bool) -> lp.Plan:
    operands = _product_operands(node)
    if operands is None:
        return node
    first, second = (scan.tensor for scan in operands)
    if first.tile[1] != second.tile[0] or first.shape[1] != second.shape[0]:
        return node  # tile products that would not fit: the tiled plan reports them
    if tuple(node.schema[-1].type.tile) != (first.tile[0], second.tile[1]):
        return node
    dense = whole_product(operands, PRODUCT, node.schema, limit)
    if dense is None or (split and dense.grid[0] < 2):
        return node  # split needs two row tiles at least: one would run on one BLAS thread alone
    return replace(dense, split=split)


def _with_epilogue(node: lp.Plan) -> lp.Plan:
    """A projection over a split DenseEinsum whose one use of the product is elementwise kernels of it
    alone (RELU(sum)): those kernels run in the DenseEinsum, on each tile as its row block is done, and
    the projection passes the value through."""
    if not (isinstance(node, lp.Project) and isinstance(node.input, lp.DenseEinsum) and node.input.split
            and node.input.epilogue is None):
        return node
    dense, value = node.input, len(node.input.schema) - 1
    uses = [n for n, expr in enumerate(node.exprs) if value in bx.columns_used(expr)]
    if len(uses) != 1 or bx.elementwise_columns(node.exprs[uses[0]]) != frozenset({value}):
        return node
    use = node.exprs[uses[0]]
    column = replace(dense.schema[-1], type=use.type)
    exprs = tuple(bx.ColumnIndex(value, use.type) if n == uses[0] else expr for n, expr in enumerate(node.exprs))
    folded = replace(dense, schema=dense.schema[:-1] + (column,), epilogue=bx.remap_columns(use, {value: 0}))
    return lp.Project(folded, exprs, node.schema)


def _product_operands(node: lp.Plan) -> Optional[tuple[lp.TensorScan, lp.TensorScan]]:
    """The scans (A, B) when `node` is SUM(MATMUL(A.v, B.v)) grouped by A's row key and B's column key over an
    inner join of scans of the stored matrices A and B (either side) on A's column key = B's row key; else None."""
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
    sides = {_value_column(scan, offset): (scan, offset, key)
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
