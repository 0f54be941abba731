"""Parse errors with line, column and the statement rendered with a caret under the fault."""
from __future__ import annotations

# a longer line is cut to a window around the fault, with "..." where it was cut (as psql does)
LINE_WIDTH = 80


def render_caret(text: str, line: int, column: int) -> str:
    """Render `LINE n: <that line>` and a caret under `column` (both 1-based)."""
    lines = text.splitlines() or [""]
    line = max(1, min(line, len(lines)))
    source, column = _window(lines[line - 1].expandtabs(1), max(column, 1))
    prefix = f"LINE {line}: "
    return f"{prefix}{source}\n{' ' * (len(prefix) + column - 1)}^"


def _window(source: str, column: int) -> tuple[str, int]:
    """At most LINE_WIDTH characters of `source` around `column`, and where `column` falls in them."""
    if len(source) <= LINE_WIDTH:
        return source, column
    start = max(0, min(column - 1 - LINE_WIDTH // 2, len(source) - LINE_WIDTH))
    end = start + LINE_WIDTH
    head, tail = ("..." if start > 0 else ""), ("..." if end < len(source) else "")
    return head + source[start:end] + tail, column - start + len(head)


class ParseError(Exception):
    """A syntax error in a statement; str() gives the message, the line and the caret."""

    def __init__(self, message: str, text: str, line: int, column: int, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.text = text
        self.line = line
        self.column = column
        self.hint = hint

    def __str__(self) -> str:
        rendered = f"{self.message}\n{render_caret(self.text, self.line, self.column)}"
        return f"{rendered}\nHINT: {self.hint}" if self.hint else rendered
