"""The logic-test files and the random-query comparison again with a tiny memory_limit, so that joins,
aggregates, sorts and retiles spill: the same results as with no limit, and something did spill.

The limit comes from the environment (TRDB_MEMORY_LIMIT = 64KB, TRDB_TEMP_DIRECTORY a temporary
folder), as a user would give it, and every connection these tests open reads it. Spill files are
counted as they are created (each is removed at the end of its statement). Kept small for CI: one
worker count (2), the random queries' seeds once; about half a minute on two cores.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import trdb
from helpers.logic_runner import logic_files, run_file
from helpers.random_queries import build_case
from test_random_queries import REGRESSION_SEEDS, check_rows, run_case
from test_random_queries import SEEDS as RANDOM_SEEDS

SQL_ROOT = Path(__file__).parent / "sql"
LIMIT = "64KB"
SEEDS = list(RANDOM_SEEDS) + list(REGRESSION_SEEDS)
SPILL_FILES: dict[str, int] = {}   # test id -> spill files its statements created


@pytest.fixture
def small_memory(tmp_path, monkeypatch, request):
    """TRDB_MEMORY_LIMIT and TRDB_TEMP_DIRECTORY for the connections of one test; counts the spill files."""
    import trdb.storage.spill as spill
    monkeypatch.setenv("TRDB_MEMORY_LIMIT", LIMIT)
    monkeypatch.setenv("TRDB_TEMP_DIRECTORY", str(tmp_path / "temp"))
    created = []
    original = spill.SpillFile.__init__

    def counting(self, path: str) -> None:
        created.append(path)
        original(self, path)
    monkeypatch.setattr(spill.SpillFile, "__init__", counting)
    yield created
    SPILL_FILES[request.node.name] = len(created)


@pytest.mark.parametrize("path", logic_files(SQL_ROOT), ids=lambda p: str(p.relative_to(SQL_ROOT)))
def test_logic_file_with_a_tiny_memory_limit(path: Path, small_memory) -> None:
    run_file(path, setup=("SET workers = 2",))


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s:03d}")
def test_random_query_with_a_tiny_memory_limit(seed: int, small_memory) -> None:
    case = build_case(seed)
    rows, _ = run_case(case)
    problems = check_rows(case, rows)
    assert not problems, f"{case.describe()}\n" + "\n".join(problems[:8])


@pytest.mark.on_cpu  # of host memory_limit
def test_the_limit_is_in_force_and_a_join_spills(small_memory) -> None:
    """One probe: the environment's limit reaches the connection, and EXPLAIN ANALYZE of a join and an
    aggregate whose state exceeds it reports bytes spilled."""
    con = trdb.connect()
    try:
        cur = con.cursor()
        assert cur.execute("SHOW memory_limit").fetchone()[0] == str(64 << 10)
        cur.execute("SET workers = 2")
        cur.execute("CREATE TENSOR X SHAPE (512, 512) TILE (32, 32) FILL RANDOM_NORMAL(0, 1, 1)")
        cur.execute("CREATE TENSOR Y SHAPE (512, 512) TILE (32, 32) FILL RANDOM_NORMAL(0, 1, 2)")
        plan = "\n".join(row[0] for row in cur.execute(
            "EXPLAIN ANALYZE SELECT X.i, Y.j, SUM(MATMUL(X.v, Y.v)) AS v FROM X JOIN Y ON X.j = Y.i "
            "GROUP BY X.i, Y.j").fetchall())
    finally:
        con.close()
    assert "spilled=" in plan, plan
    assert small_memory, "EXPLAIN ANALYZE reports a spill, but no spill file was created"


def test_the_suite_spilled(request) -> None:
    """Across the logic files and random queries above, spill files were written (when they all ran)."""
    if len(SPILL_FILES) < len(logic_files(SQL_ROOT)) + len(SEEDS):
        pytest.skip("only part of this file ran")
    assert sum(SPILL_FILES.values()) > 0, SPILL_FILES
