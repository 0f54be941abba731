"""Golden EXPLAIN plans per physical rule (exchange placement): tests/golden/physical_rules/RULE.sql, with every rule,
then with RULE disabled; and every physical rule can be disabled by name without changing a query's result.

Set TRDB_UPDATE_GOLDEN=1 to rewrite the .plan files after an intended change (then review the diff).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_rule_golden import _first_and_last_block

import trdb
from test_golden_explain import assert_matches_golden
from trdb.optimizer.physical_rules import PHYSICAL_RULE_NAMES

GOLDEN = Path(__file__).parent.parent / "golden" / "physical_rules"


def test_every_physical_rule_has_a_golden_plan() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.sql")) == sorted(PHYSICAL_RULE_NAMES)


@pytest.mark.parametrize("script", sorted(GOLDEN.glob("*.sql")), ids=lambda p: p.stem)
def test_physical_rule_plan_matches_golden(script: Path) -> None:
    with_rule, without_rule = _first_and_last_block(assert_matches_golden(script))
    assert with_rule != without_rule, f"{script.stem} did not change the plan"


@pytest.mark.parametrize("script", sorted(GOLDEN.glob("*.sql")), ids=lambda p: p.stem)
def test_disabling_a_physical_rule_keeps_the_result(script: Path) -> None:
    """The golden query's rows, with the rule and without it (the script's CREATEs at a smaller size)."""
    lines = [line for line in script.read_text().split(";\n") if line.strip() and not line.startswith("--")]
    creates = [line.replace("4096", "512").replace("1024", "256") for line in lines if line.startswith("CREATE")]
    query = next(line for line in lines if line.startswith("EXPLAIN")).removeprefix("EXPLAIN ")
    results = []
    for disabled in ("", script.stem, ",".join(PHYSICAL_RULE_NAMES)):
        with trdb.connect(workers=2, min_parallel_cost=0, disabled_rules=disabled) as con:
            for create in creates:
                con.execute(create)
            results.append(con.execute(query).fetch_tensor())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


def test_an_unknown_rule_name_lists_the_physical_rules_too() -> None:
    with trdb.connect() as con, pytest.raises(trdb.ProgrammingError, match="the physical rules are co_partitioned_join"):
        con.execute("SET disabled_rules = 'no_such_rule'")
