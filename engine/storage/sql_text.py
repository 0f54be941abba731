"""SQL text built from names: DuckDB identifiers quoted so that no name can end the statement it is in."""
from __future__ import annotations


def quote_identifier(name: str) -> str:
    """`name` as one DuckDB identifier: in double quotes, each `"` inside doubled."""
    return '"' + name.replace('"', '""') + '"'


def qualified_name(*parts: str) -> str:
    """A schema-qualified (or catalog.schema-qualified) name, each part quoted: `"_trdb"."tiles_1"`."""
    return ".".join(quote_identifier(part) for part in parts)


def quote_dotted(name: str) -> str:
    """A stored `schema.table` text (as the catalog keeps tile tables) as a quoted qualified name."""
    return qualified_name(*name.split(".", 1))
