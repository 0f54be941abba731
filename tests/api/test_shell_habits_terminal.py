"""duckdb, sqlite3 and psql habits typed at a terminal: the new modes, .schema, quit(), -cmd before the prompt,
and wrong commands answered with a hint at a fresh prompt (pexpect, synchronised on output, never on sleeps)."""
from __future__ import annotations

import re

import pytest

pexpect = pytest.importorskip("pexpect")

PROMPT = "trdb>"
INPUT_TAKEN, NEW_PROMPT = "\x1b[?2004l", "\x1b[?2004h"   # bracketed paste off when input is taken, on at a prompt
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]")


@pytest.fixture
def shell(pty_shell):
    return lambda *args: pty_shell(*args, dimensions=(50, 100), timeout=30)


def _run(child, line: str) -> list[str]:
    """Type a line and Enter; the lines shown before the next prompt, escape sequences dropped."""
    child.send(line + "\r")
    child.expect_exact(INPUT_TAKEN)
    child.expect_exact(NEW_PROMPT)
    shown = child.before
    child.expect_exact(PROMPT)
    return [ESCAPES.sub("", line).split("\r")[-1] if "\r" in line.rstrip("\r") else ESCAPES.sub("", line).rstrip("\r")
            for line in shown.split("\n")]


def test_modes_schema_and_hints_at_the_prompt(shell):
    child = shell()
    _run(child, "CREATE TENSOR Weights (r, c) SHAPE (2, 2) TILE (2, 2) FILL ONES;")
    _run(child, ".mode duckbox")
    lines = _run(child, "SELECT 1 AS one, 'a' AS letter;")
    assert "│  one  │  letter │" in lines and "│ int32 │ varchar │" in lines, lines
    _run(child, ".mode column")
    assert _run(child, "SELECT 1 AS one, 'a' AS letter;")[:3] == ["one  letter", "---  ------", "  1  a"]
    _run(child, ".mode raw")
    assert "7\tseven" in _run(child, "SELECT 7, 'seven';")
    _run(child, ".mode html")
    assert "<tr><td>7</td></tr>" in _run(child, "SELECT 7 AS n;")
    assert 'CREATE TENSOR "Weights" ("r", "c") SHAPE (2, 2) TILE (2, 2) DTYPE float32;' in _run(child, ".schema")
    lines = _run(child, "\\d weight")  # a typo: the error and its hint, then a fresh prompt (no `...>`)
    assert lines[:2] == ['Error: no tensor, view or table is named "weight"', 'HINT: did you mean "Weights"?'], lines
    lines = _run(child, "\\dd")
    assert 'Error: unknown command "\\dd"' in lines and 'HINT: did you mean "\\d"?' in lines
    assert not any("Traceback" in line or "...>" in line for line in lines)
    child.send("quit()\r")  # as in the duckdb CLI
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_cmd_runs_before_the_first_prompt(shell):
    child = shell("-cmd", ".mode csv", "-cmd", "CREATE TENSOR A SHAPE (2) TILE (2) FILL ONES;")
    lines = _run(child, "SELECT i FROM A;")
    assert lines[:2] == ["i", "0"], lines
    assert any("Expanded display is on." in line for line in _run(child, "\\x"))
    assert "i = 0" in _run(child, "SELECT i FROM A;")
    child.send(".q\r")
    child.expect(pexpect.EOF)
