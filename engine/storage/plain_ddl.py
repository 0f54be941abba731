"""Which plain SQL may create or rename a DuckDB table or view, told by DuckDB's own parser."""
from __future__ import annotations

import functools

import duckdb

Kind = duckdb.StatementType
# CREATE [TEMP] TABLE / VIEW, ALTER ... RENAME TO, and EXECUTE of a prepared one
_NAMING = {Kind.CREATE, Kind.ALTER, Kind.EXECUTE}


@functools.lru_cache(maxsize=512)  # asked for every plain statement: a repeated text is not parsed again
def may_name_relations(text: str) -> bool:
    """Whether a statement of `text` may give a table or view a name (whose names trdb must then check)."""
    try:
        return any(statement.type in _NAMING for statement in duckdb.extract_statements(text))
    except (duckdb.Error, UnicodeDecodeError):
        return False  # DuckDB cannot parse it either, so it runs none of it
