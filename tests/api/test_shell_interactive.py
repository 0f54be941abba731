"""The interactive shell, driven in a real pseudo-terminal with pexpect."""
from __future__ import annotations

import pytest

pexpect = pytest.importorskip("pexpect")

PROMPT = "trdb>"          # prompt_toolkit draws the trailing space with a cursor move
CONTINUATION = "...>"
# prompt_toolkit turns bracketed paste on when a prompt starts and off when the input is taken;
# the prompt text alone also shows up whenever the line is redrawn (each key typed).
INPUT_TAKEN, NEW_PROMPT = "\x1b[?2004l", "\x1b[?2004h"
LONG_SETUP = "CREATE TENSOR S SHAPE (2048, 2048) TILE (64, 64) FILL RANDOM_NORMAL(0, 1, 3);"
LONG_QUERY = "SELECT S.i, SUM(EXP(S.v) * T.v) AS v FROM S, S AS T GROUP BY S.i;"  # a minute of work


@pytest.fixture
def spawn(pty_shell):
    """Start `python -m trdb ARGS` in a wide pseudo-terminal, at its first prompt."""
    return lambda *args: pty_shell(*args, dimensions=(40, 200), timeout=20)


def _prompt(child, timeout: float = 20) -> str:
    """Wait for a new prompt; the output before it."""
    child.expect_exact(NEW_PROMPT, timeout=timeout)
    output = child.before
    child.expect_exact(PROMPT)
    return output


def _run(child, line: str, timeout: float = 20) -> str:
    """Type a line and Enter; the output it printed before the next prompt."""
    child.send(line + "\r")
    child.expect_exact(INPUT_TAKEN)
    return _prompt(child, timeout)


def _leave(child) -> int:
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus


def test_statements_dot_commands_errors_and_ctrl_d(spawn, tmp_path):
    child = spawn()
    child.send("CREATE TENSOR A SHAPE (4, 4)\r")
    child.expect_exact(CONTINUATION)  # no `;` yet: a continuation line
    _run(child, "  TILE (2, 2) FILL IDENTITY;")
    child.send("SELECT A.i, SUM(A.v) AS v\r")
    child.expect_exact(CONTINUATION)
    out = _run(child, "FROM A GROUP BY A.i;")
    assert "| 0 | [[1. 0.]  |\r\n|   |  [0. 1.]] |" in out and "(2 rows)" in out
    out = _run(child, ".tables")
    assert "| A    | tensor |" in out
    out = _run(child, "SELECT * FROM nosuch;")
    assert 'Error: relation "nosuch" does not exist' in out
    assert "LINE 1: SELECT * FROM nosuch\r\n                      ^" in out
    assert "Traceback" not in out
    assert ".help lists the commands" in _run(child, ".bogus")
    assert _leave(child) == 0
    history = (tmp_path / "history").read_text()
    assert "+SELECT A.i, SUM(A.v) AS v\n+FROM A GROUP BY A.i;" in history


def test_ctrl_c_cancels_a_long_statement_and_the_shell_stays(spawn):
    child = spawn()
    _run(child, LONG_SETUP)
    child.send(LONG_QUERY + "\r")
    child.expect_exact("running", timeout=30)  # the spinner shows after about a second
    child.sendintr()
    try:
        child.expect_exact("Cancelled.", timeout=30)  # well before the minute the query would take (no timing asserted)
    except pexpect.EOF:
        child.wait()
        pytest.fail(f"the shell ended on Ctrl-C: exit status {child.exitstatus}, signal {child.signalstatus}, "
                    f"output {child.before!r}")
    _prompt(child)
    out = _run(child, "SELECT COUNT(*) AS n FROM S;")
    assert "| 1024 |" in out
    assert _leave(child) == 0


def test_ctrl_c_while_typing_clears_the_line_and_history_is_recalled(spawn, tmp_path):
    (tmp_path / "history").write_text("\n# earlier\n+SELECT 40 + 2 AS answer;\n")
    child = spawn()
    child.send("SELECT 'never run'")
    child.expect_exact("never run'")
    child.sendintr()  # the line is dropped, not run
    _prompt(child)
    child.send("\x1b[A")  # the up arrow brings back the last statement of the history file
    child.expect_exact("40 + 2")
    out = _run(child, "")
    assert "|     42 |" in out and "never run" not in out
    child.send(".quit\r")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_completion_timer_mode_and_read(spawn, tmp_path):
    (tmp_path / "part.sql").write_text("SELECT 5 AS five;\nSELEC 6;\nSELECT 7 AS seven;\n")
    child = spawn()
    _run(child, "CREATE TENSOR Weights SHAPE (2, 2) TILE (1, 2) FILL ONES;")
    child.send("SELECT Wei\t")  # one candidate: completed in place
    child.expect_exact("ghts")  # the completed rest: prompt_toolkit may draw "Wei" and "ghts" apart
    child.send(".i, Weights.\t")  # the columns of Weights (i, j, v): a menu
    child.expect_exact("column")
    out = _run(child, "v FROM Weights WHERE Weights.i = 0;")
    assert "| 0 | [[1. 1.]] |" in out
    _run(child, ".timer on")
    _run(child, ".mode csv")
    out = _run(child, "SELECT 1 AS a;")
    assert "a\r\n1\r\n" in out and "Run Time:" in out
    out = _run(child, ".read part.sql")
    assert "five" in out and "part.sql:2: syntax error" in out and "seven" not in out
    assert _leave(child) == 0
