"""Golden EXPLAIN plans per optimizer rule: tests/golden/rules/RULE.sql, with every rule, then with RULE disabled.

Set TRDB_UPDATE_GOLDEN=1 to rewrite the .plan files after an intended change (then review the diff).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from test_golden_explain import assert_matches_golden
from trdb.optimizer.driver import RULE_NAMES

RULES_GOLDEN = Path(__file__).parent.parent / "golden" / "rules"


def test_every_rule_has_a_golden_plan() -> None:
    assert sorted(p.stem for p in RULES_GOLDEN.glob("*.sql")) == sorted(RULE_NAMES)


@pytest.mark.parametrize("script", sorted(RULES_GOLDEN.glob("*.sql")), ids=lambda p: p.stem)
def test_rule_plan_matches_golden(script: Path) -> None:
    actual = assert_matches_golden(script)
    with_rule, without_rule = _first_and_last_block(actual)
    assert with_rule != without_rule, f"{script.stem} did not change the plan"


def _first_and_last_block(text: str) -> tuple[str, str]:
    blocks = text.strip().split("\n\n")
    return blocks[0], blocks[-1]
