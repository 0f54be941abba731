"""Test configuration: tests/ on sys.path for the logic runner; a fresh connection fixture."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# Test data is small: without this the planner would run nearly every test plan on one worker, and
# the parallel paths (exchanges, partitioned operators) would go untested. Tests of the threshold
# itself set it back.
os.environ.setdefault("TRDB_MIN_PARALLEL_COST", "0")

import trdb  # noqa: E402


@pytest.fixture
def con():
    connection = trdb.connect()
    yield connection
    connection.close()


@pytest.fixture
def cur(con):
    return con.cursor()
