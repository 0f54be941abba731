"""Test configuration: tests/ on sys.path for the logic runner; a fresh connection fixture."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import trdb  # noqa: E402


@pytest.fixture
def con():
    connection = trdb.connect()
    yield connection
    connection.close()


@pytest.fixture
def cur(con):
    return con.cursor()
