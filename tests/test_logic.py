"""Runs every tests/sql/**/*.test logic file, once per worker count."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from logic_runner import logic_files, run_file

SQL_ROOT = Path(__file__).parent / "sql"
WORKER_COUNTS = [int(w) for w in os.environ.get("TRDB_TEST_WORKERS", "1,2").split(",")]


@pytest.mark.parametrize("workers", WORKER_COUNTS)
@pytest.mark.parametrize("path", logic_files(SQL_ROOT), ids=lambda p: str(p.relative_to(SQL_ROOT)))
def test_logic_file(path: Path, workers: int) -> None:
    run_file(path, setup=(f"SET workers = {workers}",))
