"""Parse errors with line, column and the statement rendered with a caret under the fault."""
from __future__ import annotations


def render_caret(text: str, line: int, column: int) -> str:
    """Render `LINE n: <that line>` and a caret under `column` (both 1-based)."""
    lines = text.splitlines() or [""]
    line = max(1, min(line, len(lines)))
    source = lines[line - 1].expandtabs(1)
    prefix = f"LINE {line}: "
    return f"{prefix}{source}\n{' ' * (len(prefix) + max(column, 1) - 1)}^"


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
