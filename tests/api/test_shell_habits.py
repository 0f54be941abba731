"""What duckdb, sqlite3 and psql users type, run as plain processes: the duckbox, column, list, html and raw
modes, -cmd and repeated -c, --help, .schema as runnable DDL, and clear errors for wrong commands."""
from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser

from trdb.api.shell.main import main

VALUES = "SELECT 1 AS n, 'x|y' AS s, NULL AS z, 2.5::DOUBLE AS d, '<b>&' AS h;"
SCHEMA = """
CREATE SEQUENCE ids;
CREATE TABLE people (id INTEGER PRIMARY KEY DEFAULT nextval('ids'), name VARCHAR NOT NULL, born DATE);
CREATE INDEX people_by_name ON people (name);
CREATE TENSOR W (row, col) SHAPE (6, 4) TILE (3, 2) DTYPE float64 FILL RANDOM_NORMAL(0, 1, 1);
CREATE TENSOR "Mixed Case" SHAPE (5) TILE (2) DTYPE float16 FILL ONES;
CREATE TENSOR scale SHAPE () TILE () FILL CONSTANT(2);
CREATE VIEW row_sums AS SELECT W.row, SUM(W.v) AS v FROM W GROUP BY W.row;
CREATE VIEW named AS SELECT name FROM people;
CREATE VIEW named_again AS SELECT * FROM named;
"""


def test_duckbox_shows_types_under_centred_names(capsys):
    assert main(["-duckbox", "-c", "CREATE TENSOR A SHAPE (2, 2) TILE (2, 2) FILL ONES; SELECT i, j FROM A; " + VALUES]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:5] == ["┌───────┬───────┐", "│   i   │   j   │", "│ int64 │ int64 │", "├───────┼───────┤",
                         "│     0 │     0 │"]
    assert lines[6].startswith("┌") and "int32" in lines[8] and "varchar" in lines[8] and "double" in lines[8]
    assert not any(line.startswith("(") for line in lines)  # no row count when every row is shown


def test_column_list_html_and_raw_modes(capsys):
    assert main(["-column", "-c", VALUES]) == 0
    assert capsys.readouterr().out.splitlines() == ["n  s    z       d  h", "-  ---  ----  ---  ----",
                                                    "1  x|y  NULL  2.5  <b>&"]
    assert main(["-list", "-c", VALUES]) == 0
    assert capsys.readouterr().out == "n|s|z|d|h\n1|x|y|NULL|2.5|<b>&\n"
    assert main(["-raw", "-c", VALUES + "SELECT 'two' AS a, 3 AS b;"]) == 0
    assert capsys.readouterr().out == "1\tx|y\t\t2.5\t<b>&\ntwo\t3\n"  # no names, no quoting, NULL empty
    assert main(["-html", "-c", VALUES]) == 0
    cells = _html_cells(capsys.readouterr().out)
    assert cells == [("th", ["n", "s", "z", "d", "h"]), ("td", ["1", "x|y", "NULL", "2.5", "<b>&"])]


def _html_cells(text: str) -> list[tuple[str, list[str]]]:
    """The rows of an HTML table as (tag, texts), read back by Python's HTML parser (entities decoded)."""
    rows: list[tuple[str, list[str]]] = []

    class Reader(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag == "tr":
                rows.append(("", []))
            elif tag in ("th", "td"):
                rows[-1] = (tag, rows[-1][1] + [""])

        def handle_data(self, data):
            if rows and rows[-1][1] and data.strip():
                rows[-1][1][-1] += data

    assert text.startswith("<table>\n") and text.rstrip().endswith("</table>")
    Reader(convert_charrefs=True).feed(text)
    return rows


def test_raw_explain_dot_is_a_graph_for_dot(trdb_cli, tmp_path):
    setup = trdb_cli("model.trdb", "-c", "CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL ONES;")
    assert setup.returncode == 0, setup.stderr
    done = trdb_cli("model.trdb", "-raw", "-c", "EXPLAIN (FORMAT dot) SELECT A.i, SUM(A.v) AS v FROM A GROUP BY A.i;")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith("digraph plan {\n") and done.stdout.endswith("}\n")
    assert '""' not in done.stdout and "plan\n" not in done.stdout[:5]  # no csv quoting, no column name
    if shutil.which("dot"):
        drawn = subprocess.run(["dot", "-Tsvg"], input=done.stdout, capture_output=True, text=True, timeout=60)
        assert drawn.returncode == 0 and "<svg" in drawn.stdout, drawn.stderr


def test_cmd_runs_first_and_every_c_runs_in_order(trdb_cli):
    done = trdb_cli("-cmd", ".mode csv", "-cmd", ".headers off", "-c", "SELECT 1 AS a;", "-c", "SELECT 2 AS b;")
    assert (done.returncode, done.stdout) == (0, "1\n2\n"), done.stderr  # -cmd is not `-c md`
    done = trdb_cli("-cmd", ".mode list", stdin="SELECT 3 AS c;\n")  # -cmd before standard input too
    assert (done.returncode, done.stdout) == (0, "c\n3\n"), done.stderr
    done = trdb_cli("-csv", "-c", "SELECT nope;", "-c", "SELECT 4 AS d;")
    assert done.returncode == 1 and done.stdout == "d\n4\n" and "nope" in done.stderr  # goes on, fails at the end
    done = trdb_cli("-csv", "-bail", "-c", "SELECT nope;", "-c", "SELECT 4 AS d;")
    assert done.returncode == 1 and done.stdout == ""


def test_help_lists_every_mode_flag_and_cmd(trdb_cli):
    done = trdb_cli("--help")
    assert done.returncode == 0
    for flag in ("-json", "-csv", "-raw", "-duckbox", "-column", "-list", "-html", "-jsonlines", "-cmd COMMAND",
                 "-c SQL"):
        assert f"  {flag}" in done.stdout, flag
    assert "more than once" in done.stdout


def test_schema_prints_ddl_that_recreates_the_schema(trdb_cli, tmp_path):
    assert trdb_cli("old.trdb", "-c", SCHEMA).returncode == 0
    printed = trdb_cli("old.trdb", "-c", ".schema")
    assert printed.returncode == 0 and printed.stderr == "", printed.stderr
    text = printed.stdout
    assert 'CREATE TENSOR "W" ("row", "col") SHAPE (6, 4) TILE (3, 2) DTYPE float64;' in text
    assert "CREATE TABLE people" in text and "CREATE VIEW named_again" in text and "CREATE INDEX" in text
    (tmp_path / "schema.sql").write_text(text)
    made = trdb_cli("new.trdb", "-f", "schema.sql")
    assert made.returncode == 0, made.stderr
    again = trdb_cli("new.trdb", "-c", ".schema")
    assert again.stdout == text  # the same schema, statement for statement
    tensors = trdb_cli("new.trdb", "-csv", "-noheader", "-c", "SHOW TENSORS;").stdout.splitlines()
    assert sorted(row.split(",")[0] for row in tensors) == ["Mixed Case", "W", "scale"]
    assert all(",0,0.0," in row for row in tensors), tensors  # made empty: the schema, not the data
    one = trdb_cli("old.trdb", "-c", ".schema people")
    assert one.stdout.splitlines() == [line for line in text.splitlines() if "people" in line and "VIEW" not in line]


def test_wrong_commands_say_what_to_do_and_never_show_a_traceback(trdb_cli):
    script = "CREATE TENSOR Weights SHAPE (2, 2) TILE (2, 2);\n\\foo\n\\d nosuch\n\\d weight\n.schem\n.mode duckbx\n" \
             ".schema nosuch\n\\d A B\n"
    done = trdb_cli(stdin=script)
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
    assert done.stderr.splitlines() == [
        'Error: <stdin>:2: unknown command "\\foo"', "HINT: .help lists the commands (\\? too)",
        'Error: <stdin>:3: no tensor, view or table is named "nosuch"', "HINT: .tables (or \\d) lists them",
        'Error: <stdin>:4: no tensor, view or table is named "weight"', 'HINT: did you mean "Weights"?',
        'Error: <stdin>:5: unknown command ".schem"', 'HINT: did you mean ".schema"?',
        "Error: <stdin>:6: usage: .mode table|box|duckbox|column|line|list|markdown|html|csv|tsv|json|jsonlines|raw",
        'HINT: did you mean "duckbox"?',
        'Error: <stdin>:7: no tensor, view or table is named "nosuch"', "HINT: .tables (or \\d) lists them",
        "Error: <stdin>:8: usage: \\d [NAME]"]
