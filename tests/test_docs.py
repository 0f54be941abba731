"""Every ```sql block of docs/ runs, in order, on a fresh database per file; `-- error` blocks must fail."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import trdb

DOCS = Path(__file__).parent.parent / "docs"
BLOCK = re.compile(r"```sql\n(.*?)```", re.S)


@pytest.mark.parametrize("path", sorted(DOCS.glob("**/*.md")), ids=lambda p: p.name)
def test_sql_examples_run(path: Path) -> None:
    con = trdb.connect()
    try:
        for number, block in enumerate(BLOCK.findall(path.read_text()), 1):
            cur = con.cursor()
            if block.lstrip().startswith("-- error"):
                with pytest.raises(trdb.Error):
                    cur.execute(block)
                continue
            try:
                cur.execute(block)
            except trdb.Error as exc:
                pytest.fail(f"{path.name}, sql block {number} failed: {exc}\n{block}")
    finally:
        con.close()
