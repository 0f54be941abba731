"""A running statement's progress: tiles read and written and tuples produced so far, for the shell's line.

The thread that runs a statement sets `PROGRESS` (a context variable) to a `StatementProgress`
before it starts; the statement's scans, its result and its tile writes add to it, and another
thread (the shell's) reads the counts while it runs. Counts are approximate while workers add to
them at once: they are shown, never relied on.
"""
from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Optional


@dataclass
class StatementProgress:
    """Counts of one statement's work so far."""

    tiles_read: int = 0       # tuples its scans produced (stored tiles, and shared subplans read again)
    tuples: int = 0           # tuples of its result
    tiles_written: int = 0    # tiles it stored

    def describe(self, seconds: float) -> str:
        """`1,024 tiles read (512/s), 16 written`: the counts that are not zero, with the read rate."""
        parts = []
        if self.tiles_read:
            parts.append(f"{self.tiles_read:,} tiles read ({self.tiles_read / max(seconds, 1e-9):,.0f}/s)")
        if self.tiles_written:
            parts.append(f"{self.tiles_written:,} written")
        if self.tuples:
            parts.append(f"{self.tuples:,} result tuples")
        return ", ".join(parts)


PROGRESS: ContextVar[Optional[StatementProgress]] = ContextVar("statement_progress", default=None)


def count_written(tiles: int) -> None:
    """Tiles a write stored (called in the statement's own thread)."""
    progress = PROGRESS.get()
    if progress is not None:
        progress.tiles_written += tiles
