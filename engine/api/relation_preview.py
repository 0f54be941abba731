"""What printing a relation shows: its first and last rows in a box, as a DuckDB relation prints, or as HTML."""
from __future__ import annotations

import html
import shutil
from typing import Sequence

from trdb.api.shell.cells import cell_lines, is_number
from trdb.api.shell.formatting import format_rows

PREVIEW_ROWS = 20  # rows a printed relation shows, half from its start and half from its end (as DuckDB's)


class HeadAndTail(Sequence):
    """A result's rows of which only the first and last are held: all that a table of at most
    PREVIEW_ROWS rows reads (format_rows shows the first and last rows, and counts them all)."""

    def __init__(self, head: list, tail: list, count: int):
        self.head, self.tail, self.count = head, tail, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(self.count)
            if step == 1 and stop <= len(self.head):
                return self.head[start:stop]
            if step == 1 and start >= self.count - len(self.tail) and stop == self.count:
                return self.tail[start - (self.count - len(self.tail)):]
        elif -self.count <= index < self.count:
            at = index % self.count
            if at < len(self.head):
                return self.head[at]
            if at >= self.count - len(self.tail):
                return self.tail[at - (self.count - len(self.tail))]
        raise IndexError(f"row {index} of {self.count} is not held (only the first and last rows are)")


def preview_rows(cursor, max_rows: int = PREVIEW_ROWS) -> HeadAndTail:
    """The first and last rows of the cursor's result (all of them when there are at most max_rows), the
    rows between skipped, never converted."""
    count = max(cursor.rowcount, 0)
    if count <= max_rows:
        rows = cursor.fetchall()
        return HeadAndTail(rows, [], len(rows))
    head = cursor.fetchmany((max_rows + 1) // 2)
    cursor.scroll(count - (max_rows - len(head)), "absolute")
    return HeadAndTail(head, cursor.fetchall(), count)


def preview_text(names: Sequence[str], rows: HeadAndTail, max_rows: int = PREVIEW_ROWS) -> str:
    """The rows in Unicode box lines fitted to the terminal, the middle ones left out, and how many there are."""
    width = shutil.get_terminal_size((120, 24)).columns
    return format_rows(list(names), rows, "box", max_rows=max_rows, width=width)


def preview_html(names: Sequence[str], types: Sequence[str], rows: HeadAndTail) -> str:
    """The rows as an HTML table (a notebook shows it): names and types as headers, the first and last rows,
    a row of ellipses where rows are left out, and how many rows there are."""
    head = "".join(f"<th>{html.escape(str(n))}<br><small>{html.escape(str(t))}</small></th>"
                   for n, t in zip(names, types))
    body = [_html_row(row) for row in rows.head]
    if len(rows.head) + len(rows.tail) < len(rows):
        body.append("<tr>" + "<td>&hellip;</td>" * len(names) + "</tr>")
    body += [_html_row(row) for row in rows.tail]
    shown = len(rows.head) + len(rows.tail)
    count = f"{len(rows)} row{'s' if len(rows) != 1 else ''}" + (f", {shown} shown" if shown < len(rows) else "")
    return (f"<table class=\"trdb-relation\"><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            f"<p>{count}</p>")


def _html_row(row: tuple) -> str:
    cells = []
    for value in row:
        align = " style=\"text-align: right\"" if is_number(value) else ""
        lines = [html.escape(line) for line in cell_lines(value, 60)]  # a small tile as numpy prints it
        text = lines[0] if len(lines) == 1 else "<pre style=\"margin: 0\">" + "\n".join(lines) + "</pre>"
        cells.append(f"<td{align}>{text}</td>")
    return "<tr>" + "".join(cells) + "</tr>"
