"""Golden EXPLAIN plans per optimizer rule: tests/golden/rules/RULE.sql, with every rule, then with RULE disabled.

Set TRDB_UPDATE_GOLDEN=1 to rewrite the .plan files after an intended change (then review the diff).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from test_golden_explain import explain_output
from trdb.optimizer.driver import RULE_NAMES

RULES_GOLDEN = Path(__file__).parent.parent / "golden" / "rules"


def test_every_rule_has_a_golden_plan() -> None:
    assert sorted(p.stem for p in RULES_GOLDEN.glob("*.sql")) == sorted(RULE_NAMES)


@pytest.mark.parametrize("script", sorted(RULES_GOLDEN.glob("*.sql")), ids=lambda p: p.stem)
def test_rule_plan_matches_golden(script: Path) -> None:
    actual = explain_output(script.read_text())
    golden = script.with_suffix(".plan")
    if os.environ.get("TRDB_UPDATE_GOLDEN"):
        golden.write_text(actual)
    assert golden.exists(), f"no {golden.name}: run with TRDB_UPDATE_GOLDEN=1 and review it"
    assert actual == golden.read_text(), f"EXPLAIN of {script.name} changed; see {golden.name}"
    with_rule, without_rule = _first_and_last_block(actual)
    assert with_rule != without_rule, f"{script.stem} did not change the plan"


def _first_and_last_block(text: str) -> tuple[str, str]:
    blocks = text.strip().split("\n\n")
    return blocks[0], blocks[-1]
