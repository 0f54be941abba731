"""The pipeline's first rewrite: bound EINSUM and GRAD nodes expanded into relational plans, innermost first.

An EINSUM becomes joins and aggregates (the optimizer's decomposition, which chooses tiles and a
contraction order for the workers it will run on); a GRAD becomes the plan of its gradient
(autodiff), built over its loss once the loss's own EINSUMs are decomposed.
"""
from __future__ import annotations

from trdb.autodiff.gradient import gradient_plan
from trdb.errors import Error, InternalError
from trdb.optimizer.einsum_decomposition import decompose
from trdb.planner import logical as lp


def expand(plan: lp.Plan, workers: int) -> lp.Plan:
    """The plan with no `Einsum` or `Gradient` left (the plan itself when it has none)."""
    return _Expander(workers).expand(plan)


class _Expander:
    def __init__(self, workers: int):
        self.workers = workers
        self.done: dict[int, lp.Plan] = {}  # by id: a subplan used twice is expanded once, and stays one object

    def expand(self, plan: lp.Plan) -> lp.Plan:
        known = self.done.get(id(plan))
        if known is not None:
            return known
        node = lp.with_inputs(plan, [self.expand(child) for child in plan.inputs])
        if isinstance(node, (lp.Einsum, lp.Gradient)):
            node = self._expanded(node)
        self.done[id(plan)] = node
        return node

    def _expanded(self, node) -> lp.Plan:
        try:
            if isinstance(node, lp.Einsum):
                expanded = decompose(node, self.workers)
            else:
                expanded = gradient_plan(node.input, node.param)
        except Error as exc:
            where = node.position
            raise (exc.at(where.text, where.line, where.column) if where else exc)
        if tuple(expanded.schema) != tuple(node.schema):  # what was bound above it reads these columns
            raise InternalError(f"{type(node).__name__} expanded to columns {expanded.schema}, bound as {node.schema}")
        return expanded
