"""The output modes that print every value for other programs to read: csv, tsv, json and jsonlines."""
from __future__ import annotations

import csv
import io
import json
from typing import Sequence

from trdb.api.cells import csv_text, json_text


def delimited(names: Sequence[str], rows: Sequence[tuple], delimiter: str = ",", headers: bool = True) -> str:
    """CSV (RFC 4180 quoting) or TSV; each value at its dtype's precision, a tile as a nested list."""
    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
    if headers:
        writer.writerow(names)
    for row in rows:
        writer.writerow([csv_text(v) for v in row])
    return out.getvalue().rstrip("\n")


def _object(names: Sequence[str], row: tuple) -> str:
    return "{" + ",".join(f"{json.dumps(n)}:{json_text(v)}" for n, v in zip(names, row)) + "}"


def json_array(names: Sequence[str], rows: Sequence[tuple]) -> str:
    """One JSON array for the statement, an object a line, as the duckdb CLI prints it."""
    return "[" + ",\n".join(_object(names, row) for row in rows) + "]"


def json_lines(names: Sequence[str], rows: Sequence[tuple]) -> str:
    """One JSON object per row, a row a line (JSON Lines)."""
    return "\n".join(_object(names, row) for row in rows)
