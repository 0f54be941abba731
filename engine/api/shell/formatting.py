"""Result formatting: tables fitted to the terminal (box, table, markdown, line), and the modes of modes.py."""
from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Optional, Sequence

from trdb.api.shell import modes
from trdb.api.shell.cells import cell_lines, is_number, is_tile

MODES = ("box", "table", "line", "csv", "tsv", "json", "jsonlines", "markdown")
ELLIPSIS = "…"
MIN_WIDTH = 5           # a column is not cut narrower than this (or its own width)
BOX = {"top": "┌─┬┐", "rule": "├─┼┤", "bottom": "└─┴┘", "side": "│"}
ASCII = {"top": "+-++", "rule": "+-++", "bottom": "+-++", "side": "|"}


@dataclass
class Layout:
    """What a table prints: the columns shown (None marks the hidden middle ones), and their widths."""

    columns: list[Optional[int]]
    widths: list[int]


def format_rows(names: Sequence[str], rows: Sequence[tuple], mode: str = "table", max_rows: Optional[int] = None,
                width: Optional[int] = None, headers: bool = True) -> str:
    """The rows in the given mode. Tables show at most max_rows rows (first and last) and, given a
    width, fit it: long values are cut with an ellipsis and, where even that is too wide, middle
    columns are left out."""
    if mode in ("csv", "tsv"):
        return modes.delimited(names, rows, "," if mode == "csv" else "\t", headers)
    if mode == "json":
        return modes.json_array(names, rows)
    if mode == "jsonlines":
        return modes.json_lines(names, rows)
    shown, hidden_at = _elide(rows, max_rows)
    numeric = [_numeric(shown, c) for c in range(len(names))]
    cells = _cells(names, shown, width)
    if width is not None and len(names) == 1 and mode in ("box", "table"):
        cells = [[_wrap(cell[0], width - 4)] for cell in cells]  # one column (a plan, a listing): wrapped, not cut
    if mode == "line":
        return _line_mode(names, cells)
    if hidden_at is not None:
        cells.insert(hidden_at, [["..."] for _ in names])
    if mode == "markdown":
        return _markdown(names, cells, numeric)
    layout = _fit(names, cells, width)
    text = _boxed(names, cells, numeric, layout, BOX if mode == "box" else ASCII, headers)
    footer = f"({len(rows)} row{'s' if len(rows) != 1 else ''}"
    footer += f", {len(shown)} shown" if hidden_at is not None else ""
    hidden = sum(1 for c in layout.columns if c is not None)
    footer += f", {hidden} of {len(names)} columns shown)" if hidden < len(names) else ")"
    return text + "\n" + footer


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


def _natural(names: Sequence[str], cells: list[list[list[str]]]) -> list[int]:
    return [max([len(n)] + [len(line) for row in cells for line in row[c]]) for c, n in enumerate(names)]


def _fit(names: Sequence[str], cells: list[list[list[str]]], width: Optional[int]) -> Layout:
    """Narrow the widest columns until the table fits the width; then leave out middle columns."""
    widths = _natural(names, cells)
    columns: list[Optional[int]] = list(range(len(names)))
    if width is None:
        return Layout(columns, widths)
    floor = [min(w, MIN_WIDTH) for w in widths]
    while sum(widths) + 3 * len(widths) + 1 > width:
        widest = max(range(len(widths)), key=lambda c: widths[c] - floor[c])
        if widths[widest] <= floor[widest]:
            break
        widths[widest] -= 1
    kept = list(range(len(names)))
    if sum(widths) + 3 * len(widths) + 1 > width:  # still too wide: a `…` column stands for the middle ones
        while len(kept) > 1 and sum(widths[c] for c in kept) + 3 * (len(kept) + 1) + 2 > width:
            kept.pop(len(kept) // 2)
    if len(kept) == len(names):
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


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + ELLIPSIS


def _boxed(names, cells, numeric, layout: Layout, chars: dict, headers: bool) -> str:
    def rule(kind: str) -> str:
        left, fill, cross, right = chars[kind]
        return left + cross.join(fill * (w + 2) for w in layout.widths) + right

    def lines(row: list[list[str]]) -> list[str]:
        height = max(len(cell) for cell in row) if row else 1
        out = []
        for k in range(height):
            parts = []
            for c, w in zip(layout.columns, layout.widths):
                text = ELLIPSIS if c is None else _cut(row[c][k] if k < len(row[c]) else "", w)
                right = c is not None and numeric[c]
                parts.append(text.rjust(w) if right else text.ljust(w))
            side = chars["side"]
            out.append(f"{side} " + f" {side} ".join(parts) + f" {side}")
        return out

    text = [rule("top")]
    if headers:
        text += lines([[n] for n in names]) + [rule("rule")]
    for row in cells:
        text += lines(row)
    return "\n".join(text + [rule("bottom")])


def _markdown(names, cells, numeric) -> str:
    escape = lambda text: text.replace("|", "\\|")
    row = lambda values: "| " + " | ".join(values) + " |"
    flat = [[escape(" ".join(line.strip() for line in cell)) for cell in r] for r in cells]
    align = ["-" * max(3, len(n) - 1) + ":" if numeric[c] else "-" * max(3, len(n)) for c, n in enumerate(names)]
    return "\n".join([row([escape(n) for n in names]), row(align)] + [row(r) for r in flat])


def _line_mode(names, cells) -> str:
    """One `name = value` line per column, a blank line between rows (sqlite's and duckdb's line mode)."""
    width = max((len(n) for n in names), default=0)
    blocks = []
    for row in cells:
        lines = []
        for name, cell in zip(names, row):
            lines.append(f"{name.rjust(width)} = {cell[0]}")
            lines += [" " * (width + 3) + more for more in cell[1:]]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
