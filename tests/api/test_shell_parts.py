"""The shell's parts without a terminal: script reading, dot commands, completion, formatting, cancellation."""
from __future__ import annotations

import _thread
import contextvars
import io
import re

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

import trdb
from trdb.api.shell import progress
from trdb.api.shell.commands import Quit, run_command
from trdb.api.shell.completion import SqlCompleter, keywords
from trdb.api.shell.formatting import format_rows
from trdb.api.shell.repl import ready
from trdb.api.shell.runner import Runner, script_items
from trdb.errors import QueryCancelled
from trdb.storage.progress import PROGRESS, StatementProgress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class CtrlCOnSpinner(FakeTerminal):
    """A terminal whose user presses Ctrl-C once the spinner shows (synchronised on output, not on time)."""

    def write(self, text: str) -> int:
        written = super().write(text)
        if "running" in text and not getattr(self, "pressed", False):
            self.pressed = True
            _thread.interrupt_main()
        return written


@pytest.fixture
def runner(con):
    return Runner(con, out=io.StringIO(), err=io.StringIO())


def test_script_items_statements_dot_commands_and_lines():
    text = ("-- intro; not a statement\n.mode csv\nSELECT 1\n  AS a; SELECT ';' AS b;\n"
            "/* a comment\n.not a command */ SELECT 2 AS c;\n.tables\nSELECT 3 AS d")
    items = [(item.kind, item.text, item.line) for item in script_items(text)]
    assert items == [("dot", ".mode csv", 2), ("sql", "SELECT 1\n  AS a", 3), ("sql", "SELECT ';' AS b", 4),
                     ("sql", "SELECT 2 AS c", 6), ("dot", ".tables", 7), ("sql", "SELECT 3 AS d", 8)]


def test_a_line_starting_with_a_dot_inside_a_statement_is_sql():
    items = list(script_items("SELECT 1\n.5 AS x;\n"))
    assert [(i.kind, i.line) for i in items] == [("sql", 1)]


def test_enter_runs_only_finished_input():
    assert ready("SELECT 1;") and ready("  ") and ready(".tables") and ready("SELECT 1; -- done")
    assert not ready("SELECT 1") and not ready("SELECT ';") and not ready("SELECT 1; /* open")


def test_table_elides_middle_rows():
    text = format_rows(["k"], [(n,) for n in range(10)], "table", max_rows=4)
    lines = text.splitlines()
    assert [line.strip("| ") for line in lines[3:8]] == ["0", "1", "...", "8", "9"]
    assert lines[-1] == "(10 rows, 4 shown)"


def test_dot_commands_change_the_runner(runner):
    assert run_command(runner, ".mode json") and runner.mode == "json"
    assert run_command(runner, ".timer on") and runner.timer
    assert run_command(runner, ".explain ON") and runner.explain
    assert run_command(runner, ".maxrows 0") and runner.max_rows is None
    assert not run_command(runner, ".mode xml")
    assert not run_command(runner, ".timer maybe")
    assert "usage: .mode table|box|duckbox|column|line|list|markdown|html|csv|tsv|json|jsonlines|raw" in runner.err.getvalue()
    with pytest.raises(Quit):
        run_command(runner, ".quit")


def test_explain_prefixes_queries_only(runner):
    run_command(runner, ".explain on")
    assert runner.run_script("CREATE TENSOR A SHAPE (2, 2) TILE (1, 2) FILL ONES; SELECT A.i, A.v FROM A;") == 0
    assert "TensorScanExec(A" in runner.out.getvalue()


def test_schema_tables_and_help(runner):
    runner.run_script("CREATE TENSOR A SHAPE (2, 2) TILE (1, 2) FILL ONES; CREATE TABLE plain (x INTEGER);"
                      "CREATE VIEW V AS SELECT A.i, A.v FROM A;")
    assert run_command(runner, ".tables")
    out = runner.out.getvalue()
    assert "| A     | tensor |" in out and "| V     | view   |" in out and "| plain | table  |" in out
    assert run_command(runner, ".schema A") and 'CREATE TENSOR "A" ("i", "j") SHAPE (2, 2)' in runner.out.getvalue()
    assert not run_command(runner, ".schema Nope") and "Nope" in runner.err.getvalue()
    assert run_command(runner, ".help") and ".explain on|off" in runner.out.getvalue()


def test_unknown_command_and_errors_are_one_message(runner):
    assert not run_command(runner, ".frobnicate")
    assert runner.err.getvalue() == 'Error: unknown command ".frobnicate"\nHINT: .help lists the commands (\\? too)\n'


def _complete(completer: SqlCompleter, text: str) -> list[str]:
    event = CompleteEvent(completion_requested=True)
    return [c.text for c in completer.get_completions(Document(text), event)]


def test_completion_of_names_keywords_functions_and_columns(runner):
    runner.run_script("CREATE TENSOR Weights SHAPE (2, 2) TILE (1, 2) FILL ONES;")
    completer = SqlCompleter(runner)
    assert "Weights" in _complete(completer, "SELECT * FROM Wei")
    assert _complete(completer, "SEL") == ["SELECT"] and _complete(completer, "sel") == ["select"]
    assert "SOFTMAX" in _complete(completer, "SELECT SOFT")
    assert _complete(completer, "SELECT Weights.") == ["i", "j", "v"]
    assert _complete(completer, "SELECT W.") == []
    assert _complete(completer, "SELECT w.j FROM Weights AS w WHERE w.") == ["i", "j", "v"]
    assert _complete(completer, "SELECT 'Wei") == []
    assert _complete(completer, ".ti") == [".timer"] and _complete(completer, ".mode cs") == ["csv"]
    assert _complete(completer, ".schema We") == ["Weights"]
    runner.run_script("CREATE TENSOR Weights2 SHAPE (2, 2) TILE (1, 2) FILL ONES;")
    assert "Weights2" in _complete(completer, "SELECT * FROM Wei")  # names refresh after statements
    assert {"SELECT", "TENSOR", "MINIMIZE", "RANDOM_NORMAL"} <= set(keywords())


LONG = "SELECT S.i, SUM(EXP(S.v) * T.v) AS v FROM S, S AS T GROUP BY S.i"


def test_ctrl_c_cancels_the_running_statement_and_the_connection_stays(con):
    con.execute("CREATE TENSOR S SHAPE (2048, 2048) TILE (64, 64) FILL RANDOM_NORMAL(0, 1, 3)")
    terminal = CtrlCOnSpinner()  # Ctrl-C, as the terminal would send it, once the spinner shows
    with pytest.raises(QueryCancelled):
        progress.execute(con, LONG, terminal, delay=0.2)
    assert terminal.pressed and "running" in terminal.getvalue()
    assert progress.execute(con, "SELECT COUNT(*) AS n FROM S").rows == [(1024,)]


def test_statement_errors_come_back_from_the_worker(con):
    with pytest.raises(trdb.ProgrammingError, match="does not exist"):
        progress.execute(con, "SELECT * FROM missing")
    outcome = progress.execute(con, "SELECT 1 AS x")
    assert outcome.names == ["x"] and outcome.rows == [(1,)] and outcome.elapsed >= 0


class CtrlCOnCounts(FakeTerminal):
    """A terminal whose user presses Ctrl-C once the progress line shows tiles read."""

    def write(self, text: str) -> int:
        written = super().write(text)
        if "tiles read (" in text and not getattr(self, "pressed", False):
            self.pressed = True
            _thread.interrupt_main()
        return written


def test_the_progress_line_counts_tiles_read_with_their_rate(con):
    con.execute("CREATE TENSOR S SHAPE (2048, 2048) TILE (64, 64) FILL RANDOM_NORMAL(0, 1, 3)")
    terminal = CtrlCOnCounts()
    with pytest.raises(QueryCancelled):
        progress.execute(con, LONG, terminal, delay=0.2)
    assert re.search(r"running [\d.]+ s [\d,]+ tiles read \([\d,]+/s\)", terminal.getvalue())


def test_statement_progress_counts_reads_results_and_writes(con):
    counts = StatementProgress()

    def run():
        PROGRESS.set(counts)
        con.execute("CREATE TENSOR W SHAPE (64, 64) TILE (16, 16) FILL ONES")
        assert counts.tiles_written == 16 and counts.tiles_read == 0
        con.execute("SELECT W.i, SUM(W.v) FROM W GROUP BY W.i").fetchall()
    contextvars.copy_context().run(run)
    assert counts.tiles_read == 16 and counts.tuples == 4 and counts.tiles_written == 16
    assert counts.describe(2.0) == "16 tiles read (8/s), 16 written, 4 result tuples"
