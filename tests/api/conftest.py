"""Fixtures for the shell tests: running `python -m trdb` as a subprocess, in a temporary HOME."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.fixture
def shell_env(tmp_path):
    """The environment of a trdb process: a temporary HOME and history, no TRDB_PROGRESS override."""
    env = dict(os.environ, HOME=str(tmp_path), TRDB_HISTORY=str(tmp_path / "history"),
               PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm", TRDB_WORKERS="2")
    env.pop("TRDB_PROGRESS", None)
    return env


@pytest.fixture
def trdb_cli(shell_env, tmp_path):
    """Run `python -m trdb ARGS` with the given stdin; returns the CompletedProcess (text)."""

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "trdb", *args], input=stdin, capture_output=True,
                              text=True, env=shell_env, cwd=tmp_path, timeout=60)

    return run
