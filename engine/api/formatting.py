"""Result formatting for the shell and batch files: aligned tables with a summary of each tile, CSV, JSON."""
from __future__ import annotations

import csv
import io
import json
from typing import Sequence

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
    return tile_summary(value) if isinstance(value, np.ndarray) else _scalar(value)


def _full(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def format_rows(names: Sequence[str], rows: Sequence[tuple], mode: str = "table") -> str:
    if mode == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(names)
        for row in rows:
            writer.writerow([json.dumps(_full(v)) if isinstance(v, np.ndarray) else _scalar(v) for v in row])
        return out.getvalue().rstrip("\n")
    if mode == "json":
        return json.dumps([dict(zip(names, (_full(v) for v in row))) for row in rows], default=str)
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(n)] + [len(r[c]) for r in cells]) for c, n in enumerate(names)]
    if mode == "markdown":
        line = lambda values: "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths)) + " |"
        return "\n".join([line(names), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] +
                         [line(r) for r in cells])
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    line = lambda values: "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths)) + " |"
    footer = f"({len(rows)} row{'s' if len(rows) != 1 else ''})"
    return "\n".join([rule, line(names), rule] + [line(r) for r in cells] + [rule, footer])
