"""How a table of fitted cells is drawn: boxed (box, table, duckbox), column, markdown and line."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

ELLIPSIS = "…"
BOX = {"top": "┌─┬┐", "rule": "├─┼┤", "bottom": "└─┴┘", "side": "│"}
ASCII = {"top": "+-++", "rule": "+-++", "bottom": "+-++", "side": "|"}
COLUMN_GAP = "  "       # sqlite3's and the duckdb CLI's column mode: two spaces between columns


@dataclass
class Layout:
    """What a table prints: the columns shown (None marks the hidden middle ones), and their widths."""

    columns: list[Optional[int]]
    widths: list[int]


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + ELLIPSIS


def _row_parts(row: list[list[str]], numeric: list[bool], layout: Layout, center: bool = False) -> list[list[str]]:
    """Each line of a row as its padded cells: numbers right-aligned, text left (centred in a duckbox header)."""
    height = max(len(cell) for cell in row) if row else 1
    lines = []
    for k in range(height):
        parts = []
        for c, w in zip(layout.columns, layout.widths):
            text = ELLIPSIS if c is None else cut(row[c][k] if k < len(row[c]) else "", w)
            if center:
                parts.append(text.center(w))
            else:
                parts.append(text.rjust(w) if c is not None and numeric[c] else text.ljust(w))
        lines.append(parts)
    return lines


def boxed(heads: list[list[str]], cells, numeric: list[bool], layout: Layout, chars: dict, headers: bool,
          center: bool = False) -> str:
    """A table in a frame (box: Unicode lines, table: ASCII); each head is a column's header lines."""
    def rule(kind: str) -> str:
        left, fill, cross, right = chars[kind]
        return left + cross.join(fill * (w + 2) for w in layout.widths) + right

    def lines(row: list[list[str]], centred: bool = False) -> list[str]:
        side = chars["side"]
        return [f"{side} " + f" {side} ".join(parts) + f" {side}" for parts in _row_parts(row, numeric, layout, centred)]

    text = [rule("top")]
    if headers:
        text += lines(heads, center) + [rule("rule")]
    for row in cells:
        text += lines(row)
    return "\n".join(text + [rule("bottom")])


def column(names: list[str], cells, numeric: list[bool], layout: Layout, headers: bool) -> str:
    """sqlite3's column mode: no frame, two spaces between columns, the names underlined with dashes."""
    text = []
    if headers:
        text += [COLUMN_GAP.join(parts).rstrip() for parts in _row_parts([[n] for n in names], numeric, layout)]
        text.append(COLUMN_GAP.join("-" * w for w in layout.widths))
    for row in cells:
        text += [COLUMN_GAP.join(parts).rstrip() for parts in _row_parts(row, numeric, layout)]
    return "\n".join(text)


def markdown(names, cells, numeric) -> str:
    escape = lambda text: text.replace("|", "\\|")
    row = lambda values: "| " + " | ".join(values) + " |"
    flat = [[escape(" ".join(line.strip() for line in cell)) for cell in r] for r in cells]
    align = ["-" * max(3, len(n) - 1) + ":" if numeric[c] else "-" * max(3, len(n)) for c, n in enumerate(names)]
    return "\n".join([row([escape(n) for n in names]), row(align)] + [row(r) for r in flat])


def line_mode(names, cells) -> str:
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
