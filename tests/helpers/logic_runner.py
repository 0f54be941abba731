"""A small sqllogictest-style runner for trdb: `statement ok|error`, `query [sorted]` with expected rows.

File format (blocks separated by blank lines; `#` starts a comment line):

    statement ok
    CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL ONES

    statement error <text the error message must contain>
    SELECT nothing FROM nowhere

    query [sorted]
    SELECT A.i, A.j, A.v FROM A WHERE A.i = 0
    ----
    0 0 (2,2)[1 1 1 1]

Keys print as integers, tiles as `(shape)[values]` (row-major, `%.6g`), other values with str().
"""
from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

import trdb


@dataclass
class Record:
    kind: str            # "statement" or "query"
    sql: str
    line: int
    expect_error: Optional[str] = None
    ok: bool = True
    sorted: bool = False
    expected: tuple[str, ...] = ()


def format_value(value) -> str:
    if isinstance(value, np.generic) and not isinstance(value, np.bool_):
        value = np.asarray(value)  # a 0-d tensor value comes back as a numpy scalar of its dtype
    if isinstance(value, np.ndarray):
        shape = ",".join(str(n) for n in value.shape)
        values = " ".join(_number(v) for v in value.ravel().tolist())
        return f"({shape})[{values}]"
    if isinstance(value, float):
        return _number(value)
    return "NULL" if value is None else str(value)


def _number(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = f"{value:.6g}"
        return "0" if text == "-0" else text
    return str(value)


def format_row(row: tuple) -> str:
    return " ".join(format_value(v) for v in row)


def parse_file(path: Path) -> list[Record]:
    records, lines, index = [], path.read_text().splitlines(), 0
    while index < len(lines):
        header = lines[index].strip()
        index += 1
        if not header or header.startswith("#"):
            continue
        start = index
        body = []
        while index < len(lines) and lines[index].strip() and lines[index].strip() != "----":
            body.append(lines[index])
            index += 1
        expected = []
        if index < len(lines) and lines[index].strip() == "----":
            index += 1
            while index < len(lines) and lines[index].strip():
                expected.append(lines[index].strip())
                index += 1
        records.append(_record(header, "\n".join(body), start, tuple(expected), path))
    return records


def _record(header: str, sql: str, line: int, expected: tuple, path: Path) -> Record:
    words = header.split(maxsplit=2)
    if words[0] == "statement" and words[1:2] == ["ok"]:
        return Record("statement", sql, line)
    if words[0] == "statement" and words[1:2] == ["error"]:
        return Record("statement", sql, line, ok=False, expect_error=words[2] if len(words) > 2 else "")
    if words[0] == "query":
        return Record("query", sql, line, sorted="sorted" in words[1:], expected=expected)
    raise ValueError(f"{path}:{line}: unknown record header {header!r}")


def run_file(path: Path, setup: tuple[str, ...] = ()) -> None:
    """Run every record of a .test file on a fresh in-memory database; AssertionError on a mismatch.
    `__TMP__` in a statement names a temporary folder of this run (files COPY writes and reads)."""
    con = trdb.connect()
    cur = con.cursor()
    for statement in setup:
        cur.execute(statement)
    try:
        with tempfile.TemporaryDirectory() as folder:
            for record in parse_file(path):
                _run_record(cur, dataclasses.replace(record, sql=record.sql.replace("__TMP__", folder)), path)
    finally:
        con.close()


def _run_record(cur, record: Record, path: Path) -> None:
    where = f"{path.name}:{record.line}"
    if record.kind == "statement" and not record.ok:
        try:
            cur.execute(record.sql)
        except trdb.Error as exc:
            assert record.expect_error.lower() in str(exc).lower(), \
                f"{where}: error {str(exc)!r} does not contain {record.expect_error!r}"
            return
        raise AssertionError(f"{where}: expected an error, the statement succeeded:\n{record.sql}")
    try:
        cur.execute(record.sql)
    except trdb.Error as exc:
        raise AssertionError(f"{where}: {type(exc).__name__}: {exc}\n{record.sql}") from None
    if record.kind == "query":
        actual = [format_row(r) for r in cur.fetchall()]
        if record.sorted:
            actual.sort()
        expected = list(record.expected)
        assert actual == expected, f"{where}: rows differ\nexpected:\n" + "\n".join(expected) + \
            "\nactual:\n" + "\n".join(actual)


def logic_files(root: Path) -> list[Path]:
    return sorted(root.glob("**/*.test"))


