"""The pipeline's first rewrite: bound EINSUM and GRAD nodes expanded into relational plans, innermost first.

An EINSUM becomes joins and aggregates (the optimizer's decomposition, which chooses tiles and a
contraction order for the workers it will run on), or one DenseEinsum when its operands are small
dense stored tensors (as optimizer/whole_products.py decides); a GRAD becomes the plan of its gradient
(autodiff), built over its loss once the loss's own EINSUMs are decomposed (never into a
DenseEinsum: autodiff differentiates joins and aggregates). A chain of matrix products written as joins
and SUMs, A·(X·W), becomes (A·X)·W where that multiplies A by fewer columns (optimizer/product_chains.py),
before a GRAD differentiates it.
"""
from __future__ import annotations

from trdb.autodiff.gradient import gradient_plan
from trdb.errors import Error, InternalError
from trdb.optimizer.driver import check_plan_size
from trdb.optimizer.einsum_decomposition import decompose
from trdb.optimizer.product_chains import product_chains
from trdb.optimizer.whole_products import beside_tile_products, whole_product
from trdb.plan import logical as lp

# Operators a GRAD's loss may hold, each subplan counted once per reader: autodiff builds the backward pass
# per path through the loss's plan (a loss that reads a subquery twice is differentiated through both), so
# one that reads a CTE twice, level upon level, would take hours; it is refused instead.
MAX_LOSS_OPERATORS = 5_000


def expand(plan: lp.Plan, workers: int, dense_limit: int = 0, chains: bool = True) -> lp.Plan:
    """The plan with no `Einsum` or `Gradient` left (the plan itself when it has none); `dense_limit`:
    the most bytes a DenseEinsum may hold (0: every EINSUM is decomposed). Not beside tile products: when
    the plan would also multiply tiles, every EINSUM is decomposed (a whole product slows the tile products
    after it: optimizer/whole_products.py's `beside_tile_products`). `chains`: chains of matrix products
    are re-associated where that is narrower (optimizer/product_chains.py)."""
    expanded = _Expander(workers, dense_limit, chains).expand(plan, dense_limit > 0)
    if dense_limit > 0 and beside_tile_products(expanded):
        return _Expander(workers, 0, chains).expand(plan, False)
    return expanded


class _Expander:
    def __init__(self, workers: int, dense_limit: int, chains: bool = True):
        self.workers = workers
        self.dense_limit = dense_limit
        self.chains = chains
        # by id and whether a DenseEinsum may be chosen: a subplan used twice is expanded once, and stays one object
        self.done: dict[tuple[int, bool], lp.Plan] = {}

    def expand(self, plan: lp.Plan, dense: bool) -> lp.Plan:
        known = self.done.get((id(plan), dense))
        if known is not None:
            return known
        inner = dense and not isinstance(plan, lp.Gradient)
        node = lp.with_inputs(plan, [self.expand(child, inner) for child in plan.inputs])
        if isinstance(node, (lp.Einsum, lp.Gradient)):
            node = self._expanded(node, dense)
        elif self.chains and isinstance(node, lp.Aggregate):
            node = product_chains(node)  # A·(X·W) as (A·X)·W where that is narrower, before any GRAD reads it
        self.done[(id(plan), dense)] = node
        return node

    def _expanded(self, node, dense: bool) -> lp.Plan:
        try:
            if isinstance(node, lp.Einsum):
                whole = whole_product(node.operands, node.spec.spec, node.schema, self.dense_limit) if dense else None
                expanded = whole or decompose(node, self.workers)
            else:
                check_plan_size(node.input, MAX_LOSS_OPERATORS, "differentiate")
                expanded = gradient_plan(node.input, node.param)
        except Error as exc:
            where = node.position
            raise (exc.at(where.text, where.line, where.column) if where else exc)
        if tuple(expanded.schema) != tuple(node.schema):  # what was bound above it reads these columns
            raise InternalError(f"{type(node).__name__} expanded to columns {expanded.schema}, bound as {node.schema}")
        return expanded
