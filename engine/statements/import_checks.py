"""IMPORT DATABASE's check of an export's catalog: every entry by the rules the loader reads the catalog with."""
from __future__ import annotations

import json
from typing import Any

from trdb.catalog.names import fold
from trdb.errors import DataError
from trdb.storage.catalog_validation import check_name, checked_layout, view_query

_KINDS = {"tensors": "tensor", "views": "view", "tables": "table", "duckdb_views": "DuckDB view"}


def check_export_catalog(catalog: dict, folder: str) -> None:
    """Refuse the whole import, before anything is written, when an entry is one the loader would reject
    later (a dtype trdb does not store, a float in a shape, a view text that is not a query, a name that is
    empty, missing or taken twice): committed, it would be a damaged tensor or a broken listing."""
    seen: dict[str, str] = {}
    for section, kind in _KINDS.items():
        entries = catalog.get(section, [] if section == "duckdb_views" else None)
        if not isinstance(entries, list):
            raise DataError(f"IMPORT DATABASE '{folder}': the export's catalog has no list of {section}",
                            hint="IMPORT DATABASE reads a directory EXPORT DATABASE wrote")
        for number, entry in enumerate(entries, 1):
            try:
                name = _checked_entry(section, entry)
                if fold(name) in seen:
                    raise DataError(f"the name is also that of {seen[fold(name)]}")
            except DataError as exc:
                label = entry.get("name") if isinstance(entry, dict) else None
                raise DataError(f"IMPORT DATABASE '{folder}': the export's {kind} {number} ({label!r}) is damaged: "
                                f"{exc.message}", hint="nothing was imported; export the database again") from None
            seen[fold(name)] = f"{kind} {number}"


def _checked_entry(section: str, entry: Any) -> str:
    """The entry's name, after its fields are checked (DataError)."""
    if not isinstance(entry, dict):
        raise DataError(f"it is {type(entry).__name__}, not an object")
    try:
        json.dumps(entry, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # JSON may spell a lone surrogate ("\ud800"), which no database text holds
        raise DataError("it holds text that is not valid UTF-8 (a lone surrogate)") from None
    if section == "tensors":
        checked_layout(entry.get("name"), entry.get("keys"), entry.get("value"), entry.get("dtype"),
                       entry.get("shape"), entry.get("tile"))
        return entry["name"]
    name = check_name(entry.get("name"), "name")
    if section == "views":
        try:
            view_query(entry.get("query"))
        except RecursionError:  # the check runs near the bottom of the stack: the text itself is too deep
            raise DataError("its text nests too deeply to parse") from None
    elif not isinstance(entry.get("sql"), str):
        raise DataError(f"its SQL {entry.get('sql')!r} is not text")
    return name
