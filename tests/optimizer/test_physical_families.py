"""Physical planning per operator family: the driver dispatches each logical operator to a function of a module of
optimizer/physical/, and lends the families and the physical rules every method they call on it."""
from __future__ import annotations

import ast
import typing
from pathlib import Path

from trdb.optimizer.cardinality import Estimator
from trdb.optimizer.physical_planner import PhysicalPlanner
from trdb.plan import logical as lp

OPTIMIZER = Path(__file__).parent.parent.parent / "engine" / "optimizer"
EXPANDED = {"Einsum", "Gradient"}  # expanded before physical planning (tests/planner/test_plan_visitors.py)


def test_each_logical_operator_is_planned_by_its_family_module():
    planned = {op.__name__: getattr(PhysicalPlanner, f"_{op.__name__}") for op in typing.get_args(lp.Plan)
               if op.__name__ not in EXPANDED}
    outside = {name: f.__module__ for name, f in planned.items() if not f.__module__.startswith("trdb.optimizer.physical.")}
    assert not outside, outside


def _planner_attributes(path: Path) -> set[str]:
    """The attributes a module reads on its `planner` argument."""
    return {node.attr for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "planner"}


def test_the_planner_has_every_method_the_families_and_the_rules_call():
    planner = PhysicalPlanner(2, Estimator(None))
    modules = sorted((OPTIMIZER / "physical").glob("*.py")) + sorted((OPTIMIZER / "physical_rules").glob("*.py"))
    missing = {f"{path.parent.name}/{path.name}: planner.{name}" for path in modules
               for name in _planner_attributes(path) if not hasattr(planner, name)}
    assert not missing, sorted(missing)

