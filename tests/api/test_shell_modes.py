"""Output modes, flags and dot commands without a terminal: strict JSON, CSV read back equal, fitted tables,
status lines, .dump, .output/.once, the duckdb CLI's single-dash flags."""
from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

import trdb
from trdb.api.shell.cells import cell_lines, tile_summary
from trdb.api.shell.formatting import format_rows
from trdb.api.shell.main import main
from trdb.api.shell.progress import Outcome, sparkline
from trdb.api.shell.runner import Runner, script_items

TENSORS = ("CREATE TENSOR H SHAPE (2, 3) TILE (2, 3) DTYPE float16 FILL CONSTANT(0.1); "
           "CREATE TENSOR F SHAPE (3, 4) TILE (2, 2) FILL RANDOM_NORMAL(0, 1, 7); ")


def _refuse(name: str):
    raise ValueError(f"not JSON (RFC 8259): {name}")


def strict(text: str):
    return json.loads(text, parse_constant=_refuse)


def test_json_is_strict_one_array_per_statement_and_tiles_are_lists(capsys):
    sql = TENSORS + ("SELECT * FROM H; SELECT 'nan'::DOUBLE AS n, '-inf'::DOUBLE AS m, 0.1::FLOAT AS f, NULL AS z, "
                     "true AS b, DATE '2020-01-01' AS d; SELECT 1 AS x WHERE false;")
    assert main(["-json", "-c", sql]) == 0
    text = capsys.readouterr().out
    decoder, documents, at = json.JSONDecoder(parse_constant=_refuse), [], 0
    while at < len(text.rstrip()):
        document, at = decoder.raw_decode(text, at)
        documents.append(document)
        at += len(text[at:]) - len(text[at:].lstrip())
    assert documents == [[{"i": 0, "j": 0, "v": [[0.1] * 3] * 2}],  # float16 0.1 at its own precision
                         [{"n": None, "m": None, "f": 0.1, "z": None, "b": True, "d": "2020-01-01"}], []]


def test_jsonlines_one_object_per_row(capsys):
    assert main(["--mode", "jsonlines", "-c", "SELECT range AS r, 'x' || range AS s FROM range(3);"]) == 0
    assert [strict(line) for line in capsys.readouterr().out.splitlines()] == [
        {"r": 0, "s": "x0"}, {"r": 1, "s": "x1"}, {"r": 2, "s": "x2"}]


@pytest.mark.parametrize("flag,delimiter", [("-csv", ","), ("-tsv", "\t")])
def test_csv_and_tsv_read_back_equal_at_the_dtype(capsys, flag, delimiter):
    con = trdb.connect()
    con.execute(TENSORS)
    expected = {name: {row[:-1]: row[-1] for row in con.execute(f"SELECT * FROM {name}").fetchall()}
                for name in ("H", "F")}
    con.close()
    assert main([flag, "-c", TENSORS + "SELECT * FROM H; SELECT * FROM F;"]) == 0
    text = capsys.readouterr().out
    assert "0.1, 0.1" in text and "0.0999" not in text
    tables = text.split("i" + delimiter + "j" + delimiter + "v\n")[1:]
    for name, table in zip(("H", "F"), tables):
        rows = list(csv.reader(io.StringIO(table), delimiter=delimiter))
        assert len(rows) == len(expected[name])
        for i, j, v in rows:
            tile = expected[name][(int(i), int(j))]
            read = np.array(strict(v), dtype=tile.dtype)
            np.testing.assert_array_equal(read, tile)  # every value equal, not close


def test_tables_fit_a_width_and_right_align_numbers():
    rows = [(i, "text " * 12, float(i) / 3) for i in range(3)]
    text = format_rows(["n", "words", "x"], rows, "table", width=40)
    lines = text.splitlines()
    assert all(len(line) <= 40 for line in lines) and "…" in text
    assert lines[3].startswith("| 0 |") and lines[3].endswith(" 0 |")
    many = format_rows([f"c{k}" for k in range(30)], [tuple(range(1000, 1030))], "box", width=60)
    assert all(len(line) <= 60 for line in many.splitlines()) and "│ … │" in many
    assert "of 30 columns shown" in many
    assert format_rows(["a", "b"], [(1, "x")], "line") == "a = 1\nb = x"
    plan = format_rows(["plan"], [("Scan(A)  [est. cost=1 tuples=2]  " * 4,)], "table", width=40)
    assert all(len(line) <= 40 for line in plan.splitlines()) and "…" not in plan  # one column: wrapped
    assert plan.count("tuples=2") == 4


def test_small_tiles_whole_large_ones_summarized():
    assert cell_lines(np.arange(6, dtype=np.float32).reshape(2, 3)) == ["[[0. 1. 2.]", " [3. 4. 5.]]"]
    wide = np.arange(40.0).reshape(4, 10)
    assert len(cell_lines(wide, 80)) == 4 and len(cell_lines(wide, 20)) == 1  # more values where there is room
    sparse = np.zeros((64, 64), dtype=np.float32)
    sparse[3, 5], sparse[7, 1] = 2.0, -1.0
    assert tile_summary(sparse) == "64x64 float32 min=-1 max=2 mean=0.0002441 nnz=2 (0.0488%)"
    import scipy.sparse

    assert "nnz=2" in tile_summary(scipy.sparse.csr_matrix(sparse))


def test_status_lines_and_statements_without_rows():
    out = io.StringIO()
    runner = Runner(trdb.connect(), out=out, err=io.StringIO())
    runner.show(Outcome(None, status="UPDATE A: 12 tiles"), "UPDATE A SET v = 1")
    runner.show(Outcome(["Success"], []), "SET TimeZone = 'UTC'")
    runner.show(Outcome(["Count"], [(3,)]), "CREATE TABLE t AS SELECT 1")
    assert out.getvalue() == ""  # batch: quiet
    runner.echo = True
    runner.show(Outcome(None, status="UPDATE A: 12 tiles"), "UPDATE A SET v = 1")
    runner.show(Outcome(["Success"], []), "SET TimeZone = 'UTC'")
    runner.show(Outcome(None, status="SET"), "SET workers = 2")
    runner.show(Outcome(["Count"], [(3,)]), "CREATE TABLE t AS SELECT 1")
    assert out.getvalue() == "UPDATE A: 12 tiles\nCREATE TABLE: 3 rows\n"
    runner.con.close()


def test_dot_commands_on_the_command_line_echo_bail_and_version(capsys):
    assert main(["-c", ".mode csv; SELECT 1 AS a;"]) == 0
    assert capsys.readouterr().out == "a\n1\n"
    assert main(["-echo", "-bail", "-csv", "-c", "SELECT 1 AS a; SELEC 2; SELECT 3 AS c;"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("SELECT 1 AS a;\na\n1\nSELEC 2;") and "c\n3" not in out
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("trdb ")


def test_quit_words_end_a_script():
    items = [(item.kind, item.text) for item in script_items("SELECT 1;\n\\q\nSELECT 2;\n")]
    assert items == [("sql", "SELECT 1"), ("dot", ".quit"), ("sql", "SELECT 2")]
    assert [i.text for i in script_items("exit\nquit;\n")] == [".quit", ".quit"]
    assert [i.kind for i in script_items("SELECT 1 AS quit;\n")] == ["sql"]
    from trdb.api.shell.repl import ready

    assert ready("exit") and ready("\\q") and ready("quit") and not ready("SELECT 1 AS quit")  # Enter runs them


def test_output_once_and_dump_round_trip(tmp_path, capsys):
    dump = tmp_path / "dump.sql"
    script = (TENSORS + "CREATE TABLE t AS SELECT 'it''s' AS s, 2.5 AS x; "
              "CREATE VIEW V AS SELECT F.i, F.j, F.v * 2 AS v FROM F;\n"
              f".once {tmp_path / 'one.csv'}\n.mode csv\nSELECT 1 AS a;\nSELECT 2 AS b;\n"
              f".output {dump}\n.dump\n.output\nSELECT 3 AS c;\n")
    assert main(["-c", script]) == 0
    assert (tmp_path / "one.csv").read_text() == "a\n1\n"
    assert capsys.readouterr().out == "b\n2\nc\n3\n"
    con = trdb.connect()
    con.execute(dump.read_text())
    original = trdb.connect()
    original.execute(TENSORS)
    for name in ("H", "F"):
        np.testing.assert_array_equal(con.execute(f"SELECT * FROM {name}").fetch_tensor(),
                                      original.execute(f"SELECT * FROM {name}").fetch_tensor())
    assert con.execute("SELECT * FROM t").fetchall() == [("it's", 2.5)]
    assert con.execute("SELECT COUNT(*) FROM V").fetchone()[0] == 4  # F's 2 x 2 tiles
    con.close()
    original.close()


def test_sparkline():
    assert sparkline([4.0, 3.0, 2.0, 1.0]) == "█▆▃▁"
    assert sparkline([1.0, float("nan")]) == "▁ "


def test_plot_writes_a_sparsity_picture_and_the_loss_curve(tmp_path):
    pytest.importorskip("matplotlib")
    runner = Runner(trdb.connect(), out=io.StringIO(), err=io.StringIO())
    script = ("CREATE TENSOR w SHAPE (4, 4) TILE (2, 2) FILL IDENTITY; "
              "CREATE VIEW loss AS SELECT SUM(SUMSQ(w.v)) AS v FROM w; MINIMIZE loss WRT (w) WITH (steps = 3);\n"
              f".plot loss {tmp_path / 'loss.png'}\n.plot spy w {tmp_path / 'w.png'}\n")
    assert runner.run_script(script) == 0, runner.err.getvalue()
    assert len(runner.losses) == 3 and runner.losses[0] > runner.losses[-1]
    for name in ("loss.png", "w.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runner.con.close()


def test_import_a_npy_file_as_a_tensor(tmp_path, capsys):
    array = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    np.save(tmp_path / "a.npy", array)
    assert main(["-json", "-c", f".import {tmp_path / 'a.npy'} N\nSELECT * FROM N;"]) == 0
    (row,) = strict(capsys.readouterr().out)
    np.testing.assert_array_equal(np.array(row["v"], dtype=np.float32), array)  # float32 digits read back equal
