"""Name handling shared by the catalog and binder: case folding and "did you mean" suggestions."""
from __future__ import annotations

import difflib
from typing import Iterable, Optional


def fold(name: str) -> str:
    """Names are case-insensitive, as in DuckDB and PostgreSQL."""
    return name.lower()


def suggest(name: str, candidates: Iterable[str]) -> Optional[str]:
    """The closest candidate to `name`, or None when nothing is close."""
    pool = list(candidates)
    by_fold = {fold(c): c for c in pool}
    matches = difflib.get_close_matches(fold(name), list(by_fold), n=1, cutoff=0.5)
    return by_fold[matches[0]] if matches else None


def did_you_mean(name: str, candidates: Iterable[str]) -> Optional[str]:
    close = suggest(name, candidates)
    return f'did you mean "{close}"?' if close else None
