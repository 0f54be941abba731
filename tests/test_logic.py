"""Runs every tests/sql/**/*.test logic file, once per worker count, and once more at the default
min_parallel_cost (the test suite sets 0, so that small plans get their exchanges; at the default most
of them run on one partition, as a user's do)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.logic_runner import logic_files, run_file
from trdb.config.unit_costs import MIN_PARALLEL_COST

SQL_ROOT = Path(__file__).parent / "sql"
WORKER_COUNTS = [int(w) for w in os.environ.get("TRDB_TEST_WORKERS", "1,2").split(",")]


@pytest.mark.parametrize("workers", WORKER_COUNTS)
@pytest.mark.parametrize("path", logic_files(SQL_ROOT), ids=lambda p: str(p.relative_to(SQL_ROOT)))
def test_logic_file(path: Path, workers: int) -> None:
    run_file(path, setup=(f"SET workers = {workers}",))


@pytest.mark.parametrize("path", logic_files(SQL_ROOT), ids=lambda p: str(p.relative_to(SQL_ROOT)))
def test_logic_file_at_the_default_parallel_cost(path: Path) -> None:
    run_file(path, setup=("SET workers = 2", f"SET min_parallel_cost = {MIN_PARALLEL_COST}"))
