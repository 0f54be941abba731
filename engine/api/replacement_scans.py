"""Replacement scans, as DuckDB's Python API has them: a statement may name a Python variable holding a data frame."""
from __future__ import annotations

import functools
import re
import sys
from types import FrameType
from typing import Any, Optional

# a name right after FROM, JOIN or FROM COO, or after a comma in a FROM list: where a table is named
_TABLE_NAME = re.compile(r"(?:\bFROM|\bJOIN|\bCOO|,)\s+(?=([^\W\d]\w*)\b(?!\())", re.I)  # FROM COO x
# unrolled and possessive: a repeated group that may backtrack costs the regex engine ~100 bytes per character
_STRING_OR_COMMENT = re.compile(r"'[^']*(?:''[^']*)*+'|--[^\n]*|/\*.*?\*/", re.S)


def is_frame_like(value: Any) -> bool:
    """pandas and polars DataFrames and Arrow tables, batches and readers: what a scan may read."""
    module = type(value).__module__
    if module.startswith("pyarrow"):
        return type(value).__name__ in ("Table", "RecordBatch", "RecordBatchReader")
    return module.startswith(("pandas", "polars")) and type(value).__name__ == "DataFrame"


def user_frame() -> Optional[FrameType]:
    """The innermost frame outside trdb: the user's code that called into the API."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "trdb":
        frame = frame.f_back
    return frame


_CACHED_TEXT = 16 << 10  # characters: a longer text (literal data) is rarely run again, and kept it holds memory


@functools.lru_cache(maxsize=256)
def _table_words(text: str) -> frozenset[str]:
    """The names where a table goes in `text`, outside strings and comments (a statement run again is
    not scanned again)."""
    return frozenset(_TABLE_NAME.findall(_STRING_OR_COMMENT.sub(" ", text)))


def python_scans(text: str, frame: Optional[FrameType], known) -> dict[str, Any]:
    """The data frames in `frame`'s variables (locals, then globals) that the text names where a table goes
    (after FROM, JOIN, COO or a comma) and that no relation of the database has (`known(name)`): they are
    readable under their names while the statement runs. A name used elsewhere (a column, a new tensor's
    name) is never taken for a variable."""
    if frame is None:
        return {}
    local, global_ = frame.f_locals, frame.f_globals
    found: dict[str, Any] = {}
    for word in (_table_words(text) if len(text) <= _CACHED_TEXT else _table_words.__wrapped__(text)):
        value = local[word] if word in local else global_.get(word)
        if value is not None and is_frame_like(value) and not known(word):
            found[word] = value
    return found
