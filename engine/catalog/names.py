"""Name handling shared by the catalog and binder: case folding (suggestions live with the errors)."""
from __future__ import annotations

from trdb.errors import did_you_mean, suggest

__all__ = ["fold", "suggest", "did_you_mean"]


def fold(name: str) -> str:
    """Names are case-insensitive, as in DuckDB and PostgreSQL."""
    return name.lower()
