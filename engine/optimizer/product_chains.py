"""Chains of matrix products re-associated before autodiff: A·(X·W) as (A·X)·W where X has fewer columns than W.

A graph convolution layer is written as it is read, Â·(X·W): the sparse Â multiplies the product's h columns.
(Â·X)·W multiplies it by X's f columns instead, and the gradient of the layer with respect to W, (Â·X)ᵀ·G,
multiplies nothing by Âᵀ, where Xᵀ·(Âᵀ·G) multiplies Âᵀ by h columns. With f < h (ogbn-arxiv's first layer:
128 features, 256 hidden) that is less sparse work forward and none backward, and the dense work is the same
(n·f·h either way). The choice is made when a plan is expanded, before a GRAD differentiates it, so that the
loss and its gradients read the same forward pass.

Only this form is re-associated: SUM(MATMUL(a.v, q.v)) grouped by (a.i, q.j) over an inner join on a.j = q.i,
where q (past projections that pass its columns on) is SUM(MATMUL(x.v, w.v)) grouped by (x.i, w.j) over an
inner join on x.j = w.i; x and w are scans of stored matrices (their shapes known), x has no sparse tile, and
every tile has one dtype. The same tuples come out (a tile (i, j) exists where some k and l join a's, x's and
w's tiles, either way round), with the same tile types; the sums round differently, as any other order of the
same products may.
"""
from __future__ import annotations

from typing import Optional

from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.types import Column, KeyType, TensorType
from trdb.planner.kernel_calls import call

_KEY = KeyType()


def product_chains(node: lp.Plan) -> lp.Plan:
    """`node` as (A·X)·W where it is A·(X·W) of the form above and X has fewer columns than W; else `node`."""
    outer = _product_sides(node)
    if outer is None:
        return node
    left, right = outer
    inner = _product_sides(_past_passes(right))
    if inner is None:
        return node
    middle, last = inner
    if not (_stored_matrix(middle) and _stored_matrix(last)) or middle.tensor.csr_tuples:
        return node
    if middle.tensor.shape[1] >= last.tensor.shape[1]:
        return node  # the product by A is no narrower
    if len({left.schema[2].type.dtype, middle.tensor.dtype, last.tensor.dtype}) != 1:
        return node
    if left.schema[2].type.tile[1] != middle.tensor.tile[0]:
        return node
    first = _product(left, middle, None)
    if first is None:
        return node
    result = _product(first, last, node.schema)
    return node if result is None else result


def _product_sides(node: lp.Plan) -> Optional[tuple[lp.Plan, lp.Plan]]:
    """(a, b) where `node` is SUM(MATMUL(a.v, b.v)) grouped by (a.i, b.j) over an inner join on a.j = b.i of two
    matrix relations (two keys and a 2-d tile each); else None."""
    if not (isinstance(node, lp.Aggregate) and len(node.group_by) == 2 and len(node.calls) == 1):
        return None
    join, (total,) = node.input, node.calls
    if not (isinstance(join, lp.Join) and join.kind == "INNER" and join.residual is None
            and join.left_keys == (1,) and join.right_keys == (0,)
            and _matrix(join.left.schema) and _matrix(join.right.schema)):
        return None
    product = total.arg
    if not (total.function == "SUM" and isinstance(product, bx.Call) and product.function.name == "MATMUL"
            and _indices(product.args) == [2, 5] and _indices(node.group_by) == [0, 4]):
        return None
    return join.left, join.right


def _product(left: lp.Plan, right: lp.Plan, schema) -> Optional[lp.Aggregate]:
    """SUM(MATMUL(left.v, right.v)) grouped by (left.i, right.j) over their join on left.j = right.i, under
    `schema` (None: columns i, j, sum); None where the product's tile type is not the schema's."""
    joined = left.schema + right.schema
    product = call("MATMUL", bx.ColumnIndex(2, joined[2].type), bx.ColumnIndex(5, joined[5].type))
    if schema is None:
        schema = (Column("i", _KEY), Column("j", _KEY), Column("sum", product.type))
    elif schema[2].type != product.type:
        return None
    join = lp.Join(left, right, "INNER", (1,), (0,), joined)
    return lp.Aggregate(join, (bx.ColumnIndex(0, _KEY), bx.ColumnIndex(4, _KEY)),
                        (lp.AggregateCall("SUM", product),), schema)


def _past_passes(plan: lp.Plan) -> lp.Plan:
    """Under projections that pass every column on, in order."""
    while isinstance(plan, lp.Project) and _indices(plan.exprs) == list(range(len(plan.input.schema))):
        plan = plan.input
    return plan


def _matrix(schema) -> bool:
    return (len(schema) == 3 and schema[0].is_key and schema[1].is_key and isinstance(schema[2].type, TensorType)
            and len(schema[2].type.tile) == 2)


def _stored_matrix(plan: lp.Plan) -> bool:
    return isinstance(plan, lp.TensorScan) and len(plan.tensor.shape) == 2 and not plan.tensor.external


def _indices(exprs) -> list:
    return [e.index if isinstance(e, bx.ColumnIndex) else None for e in exprs]
