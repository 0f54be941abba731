"""The output modes that print every value for other programs to read (csv, tsv, json, jsonlines): each value
at its dtype's precision, nothing more."""
from __future__ import annotations

import csv
import io
import json
import math
from decimal import Decimal
from typing import Any, Optional, Sequence

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


def csv_text(value: Any) -> str:
    """A value in a csv or tsv field: empty for NULL, a tile as a nested list."""
    if value is None:
        return ""
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
