"""Fixtures for the shell tests: running `python -m trdb` as a subprocess or in a pseudo-terminal, in a temporary HOME."""
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


PROMPT = "trdb>"  # prompt_toolkit draws the trailing space with a cursor move
# prompt_toolkit turns bracketed paste on when a prompt starts and off when the input is taken
INPUT_TAKEN, NEW_PROMPT = "\x1b[?2004l", "\x1b[?2004h"


@pytest.fixture
def pty_shell(shell_env, tmp_path):
    """Start `python -m trdb ARGS` in a pseudo-terminal of `dimensions` (rows, columns) and wait for its
    first prompt; every child is closed at the end."""
    pexpect = pytest.importorskip("pexpect")
    children = []

    def start(*args: str, dimensions: tuple[int, int], timeout: float):
        child = pexpect.spawn(sys.executable, ["-m", "trdb", *args], env=shell_env, cwd=str(tmp_path),
                              encoding="utf-8", dimensions=dimensions, timeout=timeout)
        children.append(child)
        child.expect_exact(NEW_PROMPT)
        child.expect_exact(PROMPT)
        return child

    yield start
    for child in children:
        if child.isalive():
            child.terminate(force=True)
