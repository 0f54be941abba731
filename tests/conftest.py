"""Test configuration: tests/ on sys.path for the shared helpers (tests/helpers/); a fresh connection fixture."""
from __future__ import annotations

import os
import secrets
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# Test data is small: without this the planner would run nearly every test plan on one worker, and
# the parallel paths (exchanges, partitioned operators) would go untested. Tests of the threshold
# itself set it back.
os.environ.setdefault("TRDB_MIN_PARALLEL_COST", "0")
# The Ray clusters the tests start use token authentication with a token of this run (nothing written
# to ~/.ray). Ray reads it once, when first imported (collecting a test module may import it), so it is
# set here, before anything imports Ray, and every cluster of the run gets the same one.
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))
# A run started in the background by a non-interactive shell (`pytest &`) ignores SIGINT, and so
# would every shell the tests start: the Ctrl-C tests would wait for an interrupt that never comes.
# The tests need Ctrl-C delivered, as it is in a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import trdb  # noqa: E402


@pytest.fixture(autouse=True)
def _cpu_for_on_cpu_tests(request, monkeypatch):
    """Tests marked on_cpu are of the CPU backend (host memory_limit and its spills, BLAS threads, children
    under an address-space limit, where CUDA cannot start): on a machine with a GPU, where `device = 'auto'`
    would pick it, they and their child processes run with device = 'cpu'."""
    if request.node.get_closest_marker("on_cpu"):
        monkeypatch.setenv("TRDB_DEVICE", "cpu")


@pytest.fixture
def con():
    connection = trdb.connect()
    yield connection
    connection.close()


@pytest.fixture
def cur(con):
    return con.cursor()
