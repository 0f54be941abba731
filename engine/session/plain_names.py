"""Tensors, trdb views and DuckDB's tables and views share one namespace: plain SQL DDL cannot take a name."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from trdb.catalog.catalog import Catalog
from trdb.catalog.names import fold
from trdb.errors import IntegrityError
from trdb.storage.plain_ddl import may_name_relations


@contextmanager
def names_kept_apart(catalog: Catalog, text: str) -> Iterator[None]:
    """Run plain SQL (the body) that may create or rename a table or view in a transaction of its own (or the
    open one), and fail it, undone, when it gave one a tensor's or trdb view's name. Checked on what DuckDB
    made, not on the text, so that no spelling (quotes, schemas, TEMP, comments, a prepared statement)
    slips past; a collision the database held before is not this statement's."""
    if not may_name_relations(text):
        yield
        return
    before = _taken(catalog)
    with catalog.db.statement():
        yield
        catalog.forget_ordinary_tables()
        taken = [name for name in _taken(catalog) if fold(name) not in {fold(b) for b in before}]
        if taken:
            raise _refusal(catalog, taken[0])


def _taken(catalog: Catalog) -> list[str]:
    """DuckDB tables and views whose name a tensor or trdb view has."""
    return [name for name in catalog.ordinary_tables() if catalog.has_tensor(name) or catalog.view(name)]


def _refusal(catalog: Catalog, name: str) -> IntegrityError:
    kind = "tensor" if catalog.has_tensor(name) else "view"
    return IntegrityError(f'plain SQL cannot name a DuckDB table or view "{name}": a trdb {kind} has that name',
                          hint=f"tensors, views and tables share one namespace: choose another name, or "
                               f'DROP {kind.upper()} "{name}" first')
