"""The output modes that print every value for other programs to read (csv, tsv, json, jsonlines, list, html,
raw): each value at its dtype's precision, nothing more."""
from __future__ import annotations

import csv
import html
import io
import json
import math
from decimal import Decimal
from typing import Any, Callable, Optional, Sequence

import numpy as np

from trdb.api.shell.cells import is_tile
from trdb.kernels.sparse import dense


def _element_texts(array: np.ndarray) -> np.ndarray:
    """Each element's shortest text that reads back equal at its dtype (numpy's repr of the dtype)."""
    if array.dtype == np.bool_:
        return np.where(array, "true", "false")
    return array.astype(str)


def tile_text(tile: Any, missing: Optional[str] = None) -> str:
    """A tile as a nested list, each value at its dtype's precision: [[0.1, 0.2], [0.3, 0.4]]; NaN and
    infinities as Python's json writes them, or all as `missing` (JSON's null)."""
    array = np.asarray(dense(tile))
    texts = _element_texts(array)
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        special = np.where(np.isnan(array), "NaN", np.where(array > 0, "Infinity", "-Infinity"))
        texts = np.where(np.isfinite(array), texts, special if missing is None else missing)
    return _nest(texts)


def _nest(texts: np.ndarray) -> str:
    if texts.ndim == 0:
        return str(texts)
    if texts.ndim == 1:
        return "[" + ", ".join(texts.tolist()) + "]"
    return "[" + ", ".join(_nest(part) for part in texts) + "]"


def csv_text(value: Any, null: str = "") -> str:
    """A value in a csv or tsv field: empty for NULL (or `null`), a tile as a nested list."""
    if value is None:
        return null
    if is_tile(value):
        return tile_text(value)
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, np.floating):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def json_text(value: Any) -> str:
    """A value as JSON text (RFC 8259): NaN and infinities are null, a tile nested lists at its dtype's precision."""
    if is_tile(value):
        return tile_text(value, missing="null")
    if isinstance(value, np.floating) and np.isfinite(value):
        return str(value)  # its dtype's shortest text: a float32 0.1 is 0.1
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "null"
    if value is not None and not isinstance(value, (bool, int, float, str)):
        value = str(value)
    return json.dumps(value, allow_nan=False)


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


def list_mode(names: Sequence[str], rows: Sequence[tuple], headers: bool = True) -> str:
    """sqlite3's and the duckdb CLI's list mode: values as they are, `|` between them, no quoting."""
    lines = ["|".join(names)] if headers else []
    return "\n".join(lines + ["|".join(csv_text(v, "NULL") for v in row) for row in rows])


def raw(names: Sequence[str], rows: Sequence[tuple], headers: bool = False) -> str:
    """Values exactly as they are, for a pipe (`-raw -c "EXPLAIN (FORMAT dot) ..." | dot`): no column names,
    no quoting, a tab between columns, NULL empty; a value's own final newline is not doubled."""
    return "\n".join("\t".join(csv_text(v).removesuffix("\n") for v in row) for row in rows)


def html_table(names: Sequence[str], rows: Sequence[tuple], headers: bool = True) -> str:
    """An HTML table, a row a line (as the duckdb CLI's html mode), every text escaped."""
    cell = lambda tag, value: f"<{tag}>{html.escape(value)}</{tag}>"
    lines = ["<table>"]
    if headers:
        lines.append("<tr>" + "".join(cell("th", n) for n in names) + "</tr>")
    lines += ["<tr>" + "".join(cell("td", csv_text(v, "NULL")) for v in row) + "</tr>" for row in rows]
    return "\n".join(lines + ["</table>"])


# mode -> writer(names, rows, headers): the modes printed without the table layout of formatting.py
WRITERS: dict[str, Callable[[Sequence[str], Sequence[tuple], bool], str]] = {
    "csv": lambda names, rows, headers: delimited(names, rows, ",", headers),
    "tsv": lambda names, rows, headers: delimited(names, rows, "\t", headers),
    "json": lambda names, rows, headers: json_array(names, rows),
    "jsonlines": lambda names, rows, headers: json_lines(names, rows),
    "list": list_mode, "raw": raw, "html": html_table,
}
