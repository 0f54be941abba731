"""The trdb command in batch use: -f files, -c with and without --bail, statements on stdin, output modes."""
from __future__ import annotations

import csv
import io
import json

import numpy as np

from trdb.api.shell.main import main


def _refuse(name: str):
    raise ValueError(f"not JSON (RFC 8259): {name}")


def strict_documents(text: str) -> list:
    """The JSON documents printed one after another, each parsed strictly (NaN, Infinity refused)."""
    decoder, found, at = json.JSONDecoder(parse_constant=_refuse), [], 0
    while at < len(text.rstrip()):
        document, at = decoder.raw_decode(text, at)
        found.append(document)
        while at < len(text) and text[at].isspace():
            at += 1
    return found

SCRIPT = """\
-- a comment; with a semicolon that ends nothing
CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL IDENTITY;
/* a block comment;
   over two lines; */
SELECT 'a;b' AS s,   -- a semicolon in a string
       7 AS x;
SELECT A.i, SUM(A.v) AS v
FROM A GROUP BY A.i;
"""


def test_file_runs_in_order_and_persists(trdb_cli, tmp_path):
    (tmp_path / "setup.sql").write_text(SCRIPT)
    done = trdb_cli("db.trdb", "-f", "setup.sql")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "| a;b | 7 |" in done.stdout
    assert "| 0 | [[1. 0.]  |\n|   |  [0. 1.]] |" in done.stdout  # a small tile in full, as numpy prints it
    assert done.stdout.index("a;b") < done.stdout.index("[[1. 0.]")
    again = trdb_cli("db.trdb", "-c", "SELECT COUNT(*) AS n FROM A;")
    assert again.returncode == 0, again.stderr
    assert "| 4 |" in again.stdout  # the identity's four tiles were kept in db.trdb (zero ones too: values)


def test_file_stops_at_first_error_naming_file_and_line(trdb_cli, tmp_path):
    (tmp_path / "bad.sql").write_text(
        "SELECT 1 AS first;\n\n-- the next statement starts on line 4\nSELECT *\n  FROM missing;\n"
        "SELECT 2 AS never;\n")
    done = trdb_cli("-f", "bad.sql")
    assert done.returncode == 1
    assert "first" in done.stdout and "never" not in done.stdout
    assert done.stderr.startswith("Error: bad.sql:4: relation \"missing\" does not exist")
    assert "^" in done.stderr and "Traceback" not in done.stderr


def test_file_error_without_caret_names_the_statement(capsys, tmp_path):
    path = tmp_path / "drop.sql"
    path.write_text("SELECT 1 AS x;\nDROP TENSOR Nope;\n")
    assert main(["-f", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"Error: {path}:2: " in err and "Nope" in err
    assert "STATEMENT: DROP TENSOR Nope" in err


def test_missing_file(capsys, tmp_path):
    assert main(["-f", str(tmp_path / "nothing.sql")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_command_without_bail_continues_and_fails_at_the_end(capsys):
    assert main(["-c", "SELEC 1; SELECT 2 AS after;"]) == 1
    out, err = capsys.readouterr()
    assert "after" in out
    assert 'syntax error at or near "SELEC"' in err and "LINE 1: SELEC 1" in err
    assert "HINT: did you mean SELECT?" in err


def test_command_with_bail_stops(capsys):
    assert main(["--bail", "-c", "SELEC 1; SELECT 2 AS after;"]) == 1
    out, err = capsys.readouterr()
    assert "after" not in out and "SELEC" in err


def test_command_success_exits_zero(capsys):
    assert main(["-c", "SELECT 1 AS one; SELECT 'x;y' AS s"]) == 0
    out = capsys.readouterr().out
    assert "|   1 |" in out and "| x;y |" in out  # numbers right-aligned


def test_stdin_statements_and_dot_commands(trdb_cli):
    done = trdb_cli("--mode", "csv", stdin="SELECT 1 AS a;\nSELECT * FROM zz;\n.mode json\nSELECT 3 AS b;\n")
    assert done.returncode == 1
    assert done.stdout.splitlines() == ["a", "1", '[{"b":3}]']
    assert done.stderr.startswith("Error: <stdin>:2: relation \"zz\" does not exist")


def test_stdin_with_bail_stops(trdb_cli):
    done = trdb_cli("--bail", stdin="SELECT * FROM zz;\nSELECT 3 AS b;\n")
    assert done.returncode == 1 and "b" not in done.stdout


SETUP = "CREATE TENSOR M SHAPE (3, 4) TILE (2, 2) FILL RANDOM_NORMAL(0, 1, 5);"


def _assemble(rows: list[dict]) -> np.ndarray:
    full = np.zeros((3, 4))
    for row in rows:
        tile = np.array(row["v"])
        full[2 * row["i"]:2 * row["i"] + tile.shape[0], 2 * row["j"]:2 * row["j"] + tile.shape[1]] = tile
    return full


def test_csv_mode_prints_every_value(capsys):
    assert main(["--mode", "csv", "-c", SETUP + " SELECT M.i, M.j, M.v FROM M;"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0] == ["i", "j", "v"] and len(rows) == 5
    full = _assemble([{"i": int(i), "j": int(j), "v": json.loads(v)} for i, j, v in rows[1:]])
    assert np.count_nonzero(full) == 12


def test_json_mode_matches_numpy(capsys):
    sql = SETUP + " SELECT M.i, M.j, M.v FROM M; SELECT M.i, SUM(M.v) AS s FROM M GROUP BY M.i;"
    assert main(["--mode", "json", "-c", sql]) == 0
    tiles, sums = strict_documents(capsys.readouterr().out)
    full = _assemble(tiles)
    for row in sums:  # SUM over j adds the tiles of a tile row elementwise
        top = 2 * row["i"]
        np.testing.assert_allclose(row["s"], full[top:top + 2, 0:2] + full[top:top + 2, 2:4], rtol=1e-5)


def test_markdown_mode(capsys):
    assert main(["--mode", "markdown", "-c", "SELECT 1 AS a, 'x' AS b;"]) == 0
    assert capsys.readouterr().out.splitlines() == ["| a | b |", "| ---: | --- |", "| 1 | x |"]
