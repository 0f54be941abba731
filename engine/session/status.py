"""The status message of a statement that changed something (the DB-API's `statusmessage`, printed by the shell)."""
from __future__ import annotations

import re
from typing import Optional

from trdb.catalog.catalog import Catalog
from trdb.execution.result import Result
from trdb.parser import ast
from trdb.storage.tensor_meta import TensorMeta

_CREATES = (ast.CreateTensor, ast.CreateTensorFrom, ast.CreateTensorFromCoo, ast.CreateTensorAs)
_CHANGES = {ast.InsertValues: "INSERT INTO", ast.InsertQuery: "INSERT INTO", ast.Update: "UPDATE",
            ast.Delete: "DELETE FROM"}
_BARE = {ast.SetSetting: "SET", ast.ResetSetting: "RESET", ast.Begin: "BEGIN", ast.Commit: "COMMIT",
         ast.Rollback: "ROLLBACK"}
_QUERIES = {"SELECT", "WITH", "FROM", "VALUES", "TABLE", "SHOW", "DESCRIBE", "SUMMARIZE", "PRAGMA", "EXPLAIN"}
_FIRST_WORDS = re.compile(r"\s*((?:CREATE|DROP|ALTER)(?:\s+OR\s+REPLACE)?(?:\s+TEMP(?:ORARY)?)?\s+\w+|\w+)", re.I)


def tiles(count: int) -> str:
    return f"{count} tile" + ("" if count == 1 else "s")


def describe_tensor(meta: TensorMeta) -> str:
    """`16 tiles, 4096 x 4096 float32` (a 0-d tensor: `scalar`)."""
    shape = " x ".join(str(n) for n in meta.shape) or "scalar"
    return f"{tiles(meta.tuple_count)}, {shape} {meta.dtype.name}"


def status_message(statement: ast.Statement, result: Result, catalog: Catalog) -> Optional[str]:
    """What the statement did, in a line; None for a statement that only reads."""
    if isinstance(statement, _CREATES):
        meta = catalog.tensor(statement.name)
        return f"CREATE TENSOR {meta.name}: {describe_tensor(meta)}" if meta is not None else None
    if isinstance(statement, ast.CreateView):
        return f"CREATE VIEW {statement.name}"
    if type(statement) in _CHANGES:
        return f"{_CHANGES[type(statement)]} {statement.table}: {tiles(max(result.rowcount, 0))}"
    if isinstance(statement, ast.Drop):
        return f"DROP {statement.kind} {statement.name}"
    if isinstance(statement, ast.AlterRename):
        return f"ALTER {statement.kind} {statement.name} RENAME TO {statement.new_name}"
    if isinstance(statement, ast.Minimize):
        return f"MINIMIZE {statement.view}: {len(result.rows)} step" + ("" if len(result.rows) == 1 else "s")
    return _BARE.get(type(statement))


def plain_sql_status(text: str, rows: list, description: Optional[list]) -> Optional[str]:
    """Plain SQL that changed something: its leading words (`CREATE TABLE`, `SET`), as psql shows them, and
    the rows DuckDB counted (`INSERT: 2 rows`, its result being that one `Count`); None for a query."""
    if description and ([d[0] for d in description] != ["Count"] or len(rows) != 1):
        return None
    found = _FIRST_WORDS.match(text)
    words = " ".join(found.group(1).upper().split()) if found else "OK"
    if not description:
        return words
    if words.split()[0] in _QUERIES:  # a query whose one column is named Count
        return None
    count = rows[0][0]
    return f"{words}: {count} row" + ("" if count == 1 else "s")
