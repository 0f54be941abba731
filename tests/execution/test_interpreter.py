"""The interpreter's table: every spec the planner can produce has an operator; a spec without one fails loudly."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from trdb.errors import InternalError
from trdb.execution.interpreter import OPERATORS, operator_for, router_for
from trdb.plan import physical_operators as po
from trdb.plan.estimates import Estimate
from trdb.plan.physical import SINGLE, PhysicalNode


def _specs(base=po.OperatorSpec):
    for sub in base.__subclasses__():
        if sub.operator and sub.__module__ == po.__name__:
            yield sub
        yield from _specs(sub)


def test_every_spec_has_an_operator():
    assert set(_specs()) <= set(OPERATORS), set(_specs()) - set(OPERATORS)


def test_every_exchange_has_a_router():
    assert router_for(po.Gather())([(1,)], 1) == ((0, [(1,)]),)
    assert len(list(router_for(po.Broadcast())([(1,)], 3))) == 3
    assert sum(len(rows) for _, rows in router_for(po.Repartition((0,)))([(i,) for i in range(10)], 3)) == 10


@dataclass(frozen=True)
class _Unknown(po.OperatorSpec):
    operator: ClassVar[str] = "UnknownExec"


def test_a_spec_without_an_operator_is_an_internal_error():
    node = PhysicalNode(_Unknown(), "", (), (), SINGLE, Estimate(1.0, 8.0, ()))
    with pytest.raises(InternalError, match="_Unknown"):
        operator_for(node, [], 0)
