"""Every logical operator has a rule in each plan visitor, found by one dispatch (`logical.handler`).

A new logical operator needs: its class in plan/logical.py (with `inputs`; `with_inputs` knows
its input fields), then a `_<Name>` method in each visitor below; this test names any one missing.
"""
from __future__ import annotations

import typing

import pytest

from trdb.autodiff import lineage
from trdb.autodiff.gradient import Differentiator
from trdb.errors import InternalError
from trdb.optimizer.cardinality import Estimator
from trdb.optimizer.physical_planner import PhysicalPlanner
from trdb.plan import logical as lp

OPERATORS = typing.get_args(lp.Plan)
VISITORS = {"cardinality": Estimator, "physical planning": PhysicalPlanner, "lineage": lineage}
# Operators a visitor never meets: the pipeline expands EINSUM and GRAD (`Einsum`, `Gradient`) before
# anything else walks the plan; gradients (and so lineage) are built before shared subplans become
# RowsScan leaves (tuples already computed), and over EINSUMs decomposed, never a DenseEinsum.
EXPANDED = {"Einsum", "Gradient"}
NEVER_MET = {"cardinality": EXPANDED, "physical planning": EXPANDED,
             "lineage": EXPANDED | {"RowsScan", "DenseEinsum"}}


@pytest.mark.parametrize("visitor", list(VISITORS), ids=list(VISITORS))
def test_each_visitor_has_a_rule_for_every_logical_operator(visitor):
    missing = [op.__name__ for op in OPERATORS if not hasattr(VISITORS[visitor], f"_{op.__name__}")
               and op.__name__ not in NEVER_MET.get(visitor, ())]
    assert not missing, f"{visitor} has no rule for {missing}"


def test_gradients_have_rules_for_the_operators_a_loss_is_made_of():
    """The rest (Sort, Limit, ...) are not differentiable: GRAD says so (NotSupportedError)."""
    differentiable = [op.__name__ for op in OPERATORS if hasattr(Differentiator, f"_{op.__name__}")]
    assert {"TensorScan", "Filter", "Project", "Join", "Aggregate", "UnionAll"} <= set(differentiable)


def test_a_visitor_without_a_rule_is_an_internal_error_naming_both():
    class Partial:
        pass
    plan = lp.Limit.__new__(lp.Limit)
    with pytest.raises(InternalError, match="Partial has no rule for the logical operator Limit"):
        lp.handler(Partial(), plan)
    assert lp.handler(Partial(), plan, required=False) is None
