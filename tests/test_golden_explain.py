"""Golden EXPLAIN plans: tests/golden/NAME.sql runs on a fresh database; its EXPLAIN output must equal NAME.plan.

Set TRDB_UPDATE_GOLDEN=1 to rewrite the .plan files after an intended planner change (then review the diff).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import trdb
from trdb.parser import split_statements

GOLDEN = Path(__file__).parent / "golden"


def explain_output(script: str) -> str:
    con = trdb.connect()
    cur = con.cursor()
    blocks = []
    try:
        for piece in split_statements(script):
            cur.execute(piece.text)
            if piece.text.upper().startswith("EXPLAIN"):
                blocks.append(piece.text + "\n" + "\n".join(row[0] for row in cur.fetchall()))
    finally:
        con.close()
    return "\n\n".join(blocks) + "\n"


def assert_matches_golden(script: Path) -> str:
    """Run the script; its EXPLAIN output must equal the .plan beside it (rewritten under TRDB_UPDATE_GOLDEN)."""
    actual = explain_output(script.read_text())
    golden = script.with_suffix(".plan")
    if os.environ.get("TRDB_UPDATE_GOLDEN"):
        golden.write_text(actual)
    assert golden.exists(), f"no {golden.name}: run with TRDB_UPDATE_GOLDEN=1 and review it"
    assert actual == golden.read_text(), f"EXPLAIN of {script.name} changed; see {golden.name}"
    return actual


@pytest.mark.parametrize("script", sorted(GOLDEN.glob("*.sql")), ids=lambda p: p.stem)
def test_explain_matches_golden(script: Path) -> None:
    assert_matches_golden(script)
