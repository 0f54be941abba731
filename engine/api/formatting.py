"""Result formatting for the shell and batch files: aligned tables with a summary of each tile, CSV, JSON."""
from __future__ import annotations

import csv
import io
import json
from typing import Optional, Sequence

import numpy as np

MODES = ("table", "csv", "json", "markdown")


def tile_summary(tile: np.ndarray, values: int = 4) -> str:
    """shape, dtype, the first values and the Frobenius norm of a tile."""
    array = np.asarray(tile)
    if array.ndim == 0:
        return _scalar(array.item())
    first = ", ".join(_scalar(v) for v in array.ravel()[:values].tolist())
    more = ", ..." if array.size > values else ""
    norm = float(np.linalg.norm(array.astype(np.float64).ravel())) if array.size else 0.0
    shape = "x".join(str(n) for n in array.shape)
    return f"{shape} {array.dtype.name} [{first}{more}] norm={norm:.4g}"


def _scalar(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "NULL" if value is None else str(value)


def _cell(value) -> str:
    text = tile_summary(value) if isinstance(value, np.ndarray) else _scalar(value)
    return text.replace("\n", "\\n")  # one row, one line: keeps the columns aligned


def _full(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def format_rows(names: Sequence[str], rows: Sequence[tuple], mode: str = "table",
                max_rows: Optional[int] = None) -> str:
    """The rows in the given mode; table and markdown show at most max_rows rows (first and last)."""
    if mode == "csv":
        return _csv(names, rows)
    if mode == "json":
        return json.dumps([dict(zip(names, (_full(v) for v in row))) for row in rows], default=str)
    shown, hidden_at = _elide(rows, max_rows)
    cells = [[_cell(v) for v in row] for row in shown]
    if hidden_at is not None:
        cells.insert(hidden_at, ["..."] * len(names))
    widths = [max([len(n)] + [len(r[c]) for r in cells]) for c, n in enumerate(names)]
    line = lambda values: "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths)) + " |"
    if mode == "markdown":
        return "\n".join([line(names), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] +
                         [line(r) for r in cells])
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    footer = f"({len(rows)} row{'s' if len(rows) != 1 else ''}"
    footer += f", {len(shown)} shown)" if hidden_at is not None else ")"
    return "\n".join([rule, line(names), rule] + [line(r) for r in cells] + [rule, footer])


def _csv(names: Sequence[str], rows: Sequence[tuple]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(names)
    for row in rows:
        writer.writerow([json.dumps(_full(v)) if isinstance(v, np.ndarray) else _scalar(v) for v in row])
    return out.getvalue().rstrip("\n")


def _elide(rows: Sequence[tuple], max_rows: Optional[int]) -> tuple[Sequence[tuple], Optional[int]]:
    """The rows to show and where the '...' row goes (None when all are shown)."""
    if max_rows is None or max_rows <= 0 or len(rows) <= max_rows:
        return rows, None
    head = (max_rows + 1) // 2
    return list(rows[:head]) + list(rows[len(rows) - (max_rows - head):]), head
