"""What a person sees in an 80-column terminal: fitted tables, small tiles in full, MINIMIZE's progress and
Ctrl-C, .spy, the quit words and the dot commands (pexpect, synchronised on output, never on sleeps)."""
from __future__ import annotations

import re

import pytest

pexpect = pytest.importorskip("pexpect")

COLUMNS = 80
PROMPT = "trdb>"
INPUT_TAKEN, NEW_PROMPT = "\x1b[?2004l", "\x1b[?2004h"   # bracketed paste off when input is taken, on at a prompt
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]")
WIDE = ("CREATE TENSOR Wide SHAPE (2, 6) TILE (2, 3) FILL IDENTITY; CREATE TABLE notes AS SELECT 1 AS n, "
        "'a rather long note that would never fit beside the other columns of this row' AS note, "
        "'another long text column that will have to be cut as well' AS more;")
TRAIN = ("CREATE TENSOR w SHAPE (4, 4) TILE (4, 4) FILL RANDOM_NORMAL(0, 1, 1); "
         "CREATE VIEW loss AS SELECT SUM(SUMSQ(w.v)) AS v FROM w;")


def _visible(text: str) -> list[str]:
    """The lines as the terminal shows them: escape sequences dropped, carriage returns folded."""
    return [ESCAPES.sub("", line).split("\r")[-1] if "\r" in line.rstrip("\r") else ESCAPES.sub("", line).rstrip("\r")
            for line in text.split("\n")]


@pytest.fixture
def shell(pty_shell):
    """Start `python -m trdb ARGS` in an 80-column pseudo-terminal, at its first prompt."""
    return lambda *args: pty_shell(*args, dimensions=(50, COLUMNS), timeout=30)


def _prompt(child) -> str:
    child.expect_exact(NEW_PROMPT)
    output = child.before
    child.expect_exact(PROMPT)
    return output


def _run(child, line: str) -> list[str]:
    child.send(line + "\r")
    child.expect_exact(INPUT_TAKEN)
    return _visible(_prompt(child))


def _tables_fit_the_terminal_and_small_tiles_show_whole(child):
    _run(child, WIDE)
    lines = _run(child, "SELECT * FROM notes;")
    table = [line for line in lines if line.startswith(("+", "|"))]
    assert table and all(len(line) <= COLUMNS for line in table), lines
    assert any("…" in line for line in table)  # long text cut with an ellipsis, as duckdb's box mode
    assert re.search(r"\|\s+1 \|", table[3])   # numbers right-aligned
    lines = _run(child, "SELECT * FROM Wide;")  # 2 x 3 tiles: all six values, as numpy prints them
    assert "| 0 | 0 | [[1. 0. 0.]  |" in lines and "|   |   |  [0. 1. 0.]] |" in lines
    _run(child, ".mode box")
    lines = _run(child, "SELECT *, note AS again, more AS twice FROM notes;")
    assert any(line.startswith("┌") for line in lines) and all(len(line) <= COLUMNS for line in lines), lines
    _run(child, ".mode table")


def test_progress_shows_minimize_steps_and_loss_and_the_tiles_a_query_read(shell):
    child = shell()
    _run(child, TRAIN)
    child.send("MINIMIZE loss WRT (w) WITH (learning_rate = 0.001, steps = 100000);\r")
    child.expect(r"MINIMIZE step (\d+)/100000 loss=([0-9.e+-]+) ([▁▂▃▄▅▆▇█]+)")  # live, on the progress line
    shown = int(child.match.group(1))
    assert shown >= 1 and float(child.match.group(2)) > 0
    child.sendintr()
    child.expect(r"Cancelled\. MINIMIZE kept (\d+) of 100000 steps \(the steps it had committed\)")
    kept = int(child.match.group(1))
    assert kept >= shown
    _prompt(child)
    _run(child, "CREATE TENSOR S SHAPE (2048, 2048) TILE (64, 64) FILL RANDOM_NORMAL(0, 1, 3);")
    child.send("SELECT S.i, SUM(EXP(S.v) * T.v) AS v FROM S, S AS T GROUP BY S.i;\r")  # long: a cross join
    child.expect(r"running [\d.]+ s ([\d,]+) tiles read \(([\d,]+)/s\)")  # the work done so far, and its rate
    assert int(child.match.group(1).replace(",", "")) >= 1
    child.sendintr()
    child.expect_exact("Cancelled.")
    _prompt(child)
    child.send("quit\r")  # a quit word: the shell ends, no continuation prompt
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0 and "...>" not in child.before


def test_fitted_tables_spy_and_dot_commands(shell, tmp_path):
    (tmp_path / "rows.csv").write_text("k,x\n1,0.5\n2,0.25\n")
    child = shell()
    _tables_fit_the_terminal_and_small_tiles_show_whole(child)
    _run(child, "CREATE TENSOR B SHAPE (8, 12) TILE (2, 3) FILL IDENTITY;")
    lines = _run(child, ".spy B")
    frame = [line for line in lines if line.startswith(("┌", "│", "└"))]
    # 4 x 4 tiles, two characters each: 2 of a tile's 6 entries non-zero is ▒, 1 is ░, no tile is blank
    # FILL IDENTITY stores every tile: the off-diagonal ones are stored zeros (·), not absent
    assert frame == ["┌────────┐", "│▒▒······│", "│░░░░····│", "│··▒▒····│", "│····▒▒··│", "└────────┘"], lines
    assert "B: 8 x 12, tiles 2 x 3: 16 of 16 tiles stored, 8 non-zeros" in "\n".join(lines)
    assert any("current max rows: 40" in line for line in _run(child, ".maxrows"))
    lines = _run(child, ".import rows.csv t")  # a statement that changes something says what it did
    assert any(line.startswith("CREATE TABLE") and line.endswith("2 rows") for line in lines), lines
    _run(child, ".mode line")
    assert _run(child, "SELECT * FROM t WHERE k = 1;")[:2] == ["k = 1", "x = 0.5"]
    assert "INSERT INTO \"t\" VALUES (2, 0.25);" in _run(child, ".dump t")
    _run(child, ".output all.txt")
    assert _run(child, "SELECT 7 AS seven;") == [""] and (tmp_path / "all.txt").read_text().startswith("seven = 7")
    _run(child, ".output")
    _run(child, ".headers off")
    _run(child, ".mode csv")
    _run(child, ".once out.csv")
    assert not any("0.25" in line for line in _run(child, "SELECT * FROM t ORDER BY k;"))
    assert (tmp_path / "out.csv").read_text() == "1,0.5\n2,0.25\n"
    assert "two words" in _run(child, ".print two words")
    assert any("mode: csv" in line for line in _run(child, ".show"))
    assert "from a shell" in _run(child, ".shell echo from a shell")
    assert _run(child, "SET TimeZone = 'UTC';") == [""]  # nothing, not an empty table
    _run(child, ".open second.trdb")
    lines = _run(child, ".tables")
    assert not any("B" in line.split(",")[0] for line in lines)  # a new, empty database
    child.send("\\q\r")  # psql's quit word
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0 and (tmp_path / "second.trdb").exists()


def test_psql_habits_at_the_prompt(shell):
    """psql's \\d, \\d NAME, \\dt, \\l, \\timing and \\x, the duckdb CLI's .q, and Python's exit(), typed at a terminal."""
    child = shell()
    _run(child, "CREATE TENSOR A SHAPE (2, 2) TILE (2, 2) FILL ONES;")
    assert any("| A    | tensor |" in line for line in _run(child, "\\d")), "\\d lists the relations"
    assert any(line.startswith("| v ") and "TENSOR(" in line for line in _run(child, "\\d A")), "\\d NAME describes"
    assert any("| A    | tensor |" in line for line in _run(child, "\\dt"))
    assert any("| main | :memory: |" in line for line in _run(child, "\\l"))
    assert any("Expanded display is on." in line for line in _run(child, "\\x"))
    assert "two = 2" in _run(child, "SELECT 1 AS one, 2 AS two;")
    assert any("Expanded display is off." in line for line in _run(child, "\\x"))
    _run(child, "\\timing")
    assert any(line.startswith("Run Time:") for line in _run(child, "SELECT 1;"))
    child.send("exit()\r")
    child.expect(pexpect.EOF)
    child = shell()
    child.send(".q\r")
    child.expect(pexpect.EOF)
