"""Result formatting: tables fitted to the terminal (drawn by table_styles.py), and the modes of modes.py."""
from __future__ import annotations

import textwrap
from typing import Optional, Sequence

from trdb.api.shell import modes, table_styles
from trdb.api.shell.cells import cell_lines, is_number, is_tile
from trdb.api.shell.table_styles import ASCII, BOX, Layout

MODES = {  # each output mode, and what it prints (trdb --help lists them)
    "table": "a table in ASCII lines, fitted to the terminal (the default)",
    "box": "the table in Unicode box lines",
    "duckbox": "the box with each column's type under its name (the duckdb CLI's default)",
    "column": "columns two spaces apart, no frame (sqlite3's column mode)",
    "line": "one `name = value` line per column, a blank line between rows",
    "list": "values as they are with | between them (sqlite3's list mode)",
    "markdown": "a Markdown table",
    "html": "an HTML <table>",
    "csv": "CSV, every value at its dtype's precision",
    "tsv": "tab-separated values",
    "json": "one JSON array per statement",
    "jsonlines": "one JSON object per row",
    "raw": "values exactly as they are: no names, no quoting, a tab between columns (for pipes)",
}
MIN_WIDTH = 5           # a column is not cut narrower than this (or its own width)
# the duckdb CLI's names of types under a duckbox header; any other type is its own name in lower case
DUCKBOX_TYPES = {"TINYINT": "int8", "SMALLINT": "int16", "INTEGER": "int32", "BIGINT": "int64", "HUGEINT": "int128",
                 "UTINYINT": "uint8", "USMALLINT": "uint16", "UINTEGER": "uint32", "UBIGINT": "uint64"}


def format_rows(names: Sequence[str], rows: Sequence[tuple], mode: str = "table", max_rows: Optional[int] = None,
                width: Optional[int] = None, headers: bool = True, types: Optional[Sequence] = None) -> str:
    """The rows in the given mode. Tables show at most max_rows rows (first and last) and, given a
    width, fit it: long values are cut with an ellipsis and, where even that is too wide, middle
    columns are left out. types (each column's type) show under a duckbox's column names."""
    if mode in modes.WRITERS:
        return modes.WRITERS[mode](names, rows, headers)
    shown, hidden_at = _elide(rows, max_rows)
    numeric = [_numeric(shown, c) for c in range(len(names))]
    cells = _cells(names, shown, width)
    if width is not None and len(names) == 1 and mode in ("box", "table", "duckbox"):
        cells = [[_wrap(cell[0], width - 4)] for cell in cells]  # one column (a plan, a listing): wrapped, not cut
    if mode == "line":
        return table_styles.line_mode(names, cells)
    if hidden_at is not None:
        cells.insert(hidden_at, [["..."] for _ in names])
    if mode == "markdown":
        return table_styles.markdown(names, cells, numeric)
    heads = [[n, duckbox_type(t)] for n, t in zip(names, types)] if mode == "duckbox" and types else [[n] for n in names]
    layout = _fit(heads, cells, width)
    if mode == "column":
        return table_styles.column(list(names), cells, numeric, layout, headers)
    text = table_styles.boxed(heads, cells, numeric, layout, ASCII if mode == "table" else BOX, headers,
                              center=mode == "duckbox")
    kept = sum(1 for c in layout.columns if c is not None)
    if mode == "duckbox" and hidden_at is None and kept == len(names):
        return text  # the duckdb CLI counts rows under a duckbox only when some are left out
    return text + "\n" + _footer(len(rows), len(shown) if hidden_at is not None else None, kept, len(names))


def _footer(count: int, shown: Optional[int], kept: int, columns: int) -> str:
    """`(12 rows)`, `(100 rows, 40 shown)`, `(1 row, 5 of 30 columns shown)`."""
    footer = f"({count} row{'s' if count != 1 else ''}"
    footer += f", {shown} shown" if shown is not None else ""
    return footer + (f", {kept} of {columns} columns shown)" if kept < columns else ")")


def duckbox_type(code) -> str:
    """A column's type as the duckdb CLI's duckbox names it: int32, varchar, double, tensor(float32, [2, 2])."""
    text = str(code).strip('"') if code is not None else ""  # DuckDB quotes the type of NULL: "NULL"
    return DUCKBOX_TYPES.get(text.upper(), text.lower())


def _elide(rows: Sequence[tuple], max_rows: Optional[int]) -> tuple[Sequence[tuple], Optional[int]]:
    """The rows to show and where the '...' row goes (None when all are shown)."""
    if max_rows is None or max_rows <= 0 or len(rows) <= max_rows:
        return rows, None
    head = (max_rows + 1) // 2
    return list(rows[:head]) + list(rows[len(rows) - (max_rows - head):]), head


def _numeric(rows: Sequence[tuple], column: int) -> bool:
    values = [row[column] for row in rows if row[column] is not None]
    return bool(values) and all(is_number(v) for v in values)


def _cells(names: Sequence[str], rows: Sequence[tuple], width: Optional[int]) -> list[list[list[str]]]:
    """Each cell's lines; a tile column gets the room the other columns leave it."""
    tiles = [any(is_tile(row[c]) for row in rows) for c in range(len(names))]
    cells = [[cell_lines(v) if not tiles[c] else [] for c, v in enumerate(row)] for row in rows]
    room = None
    if width is not None and any(tiles):
        others = sum(max([len(names[c])] + [len(line) for row in cells for line in row[c]])
                     for c in range(len(names)) if not tiles[c])
        room = max(MIN_WIDTH, (width - 1 - 3 * len(names) - others) // sum(tiles))
    for row, values in zip(cells, rows):
        for c, value in enumerate(values):
            if tiles[c]:
                row[c] = cell_lines(value, room)
    return cells


def _natural(heads: list[list[str]], cells: list[list[list[str]]]) -> list[int]:
    return [max([len(line) for line in head] + [len(line) for row in cells for line in row[c]])
            for c, head in enumerate(heads)]


def _fit(heads: list[list[str]], cells: list[list[list[str]]], width: Optional[int]) -> Layout:
    """Narrow the widest columns until the table fits the width; then leave out middle columns. Each
    head is a column's header lines (its name, and in a duckbox its type)."""
    widths = _natural(heads, cells)
    columns: list[Optional[int]] = list(range(len(heads)))
    if width is None:
        return Layout(columns, widths)
    floor = [min(w, MIN_WIDTH) for w in widths]
    while sum(widths) + 3 * len(widths) + 1 > width:
        widest = max(range(len(widths)), key=lambda c: widths[c] - floor[c])
        if widths[widest] <= floor[widest]:
            break
        widths[widest] -= 1
    kept = list(range(len(heads)))
    if sum(widths) + 3 * len(widths) + 1 > width:  # still too wide: a `…` column stands for the middle ones
        while len(kept) > 1 and sum(widths[c] for c in kept) + 3 * (len(kept) + 1) + 2 > width:
            kept.pop(len(kept) // 2)
    if len(kept) == len(heads):
        return Layout(columns, widths)
    gap = next((i for i, c in enumerate(kept) if c != i), len(kept))
    shown = kept[:gap] + [None] + kept[gap:]
    return Layout(shown, [widths[c] if c is not None else 1 for c in shown])


def _wrap(lines: list[str], width: int) -> list[str]:
    """Lines longer than the width broken at spaces, continued under their indent plus four."""
    out = []
    for line in lines:
        indent = " " * (len(line) - len(line.lstrip()) + 4)
        out += textwrap.wrap(line, max(width, len(indent) + 10), subsequent_indent=indent, break_on_hyphens=False,
                             drop_whitespace=True) or [""]
    return out
