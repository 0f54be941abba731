"""EXPORT DATABASE 'dir' / IMPORT DATABASE 'dir': trdb's backup and restore (Parquet files plus the catalog).

The directory holds `catalog.json` (tensors with their layout, Adam's step counts, trdb views, ordinary
tables and DuckDB views with the SQL that creates them), one tile-form Parquet file per tensor (the layout COPY ... TO
writes) and one Parquet file per ordinary table. IMPORT recreates everything in one transaction, into
a database that has none of the names yet; tiles come back bit for bit (dense; a tile stored as CSR
is written dense and stored again by the same density rule).
"""
from __future__ import annotations

import json
import os

import numpy as np

from trdb.catalog.names import fold
from trdb.catalog.optimizer_state import state_parameter
from trdb.errors import DataError, OperationalError
from trdb.execution.result import Result
from trdb.ingest.copy_files import system_error
from trdb.parser import ast
from trdb.statements.context import StatementContext
from trdb.statements.copy import read_tiles_into, write_result_file
from trdb.statements.import_checks import check_export_catalog
from trdb.storage import export as stored
from trdb.storage import file_sandbox
from trdb.storage.adam_state import all_adam_steps, write_adam_steps
from trdb.storage.tensor_meta import TensorMeta

CATALOG = "catalog.json"
FORMAT = "trdb-export"


def export_database(sc: StatementContext, node: ast.ExportDatabase) -> Result:
    folder = node.path
    if not folder or "\x00" in folder or "://" in folder:
        raise sc.bind.fail(node, f"EXPORT DATABASE writes to a local directory, not {folder!r}")
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise sc.bind.fail(node, f"cannot export to '{folder}': it is a file", error=OperationalError)
    folder = _checked(sc, node, folder)  # resolved: every file is written under the directory checked
    catalog_path = _checked(sc, node, os.path.join(folder, CATALOG))
    os.makedirs(folder, exist_ok=True)
    with sc.db.statement(writes=False):  # one snapshot for every file
        catalog = {"format": FORMAT, "version": 1, "tensors": [], "views": [], "tables": [], "duckdb_views": []}
        for number, meta in enumerate(sc.catalog.tensors()):
            file = f"tensor_{number}.parquet"
            select = ast.Select((ast.SelectItem(ast.Star(None)),), (ast.TableRef(meta.name, None),), None)
            result = sc.run_query(ast.Query(select))
            try:
                write_result_file(result, os.path.join(folder, file), "parquet", "tiles")
            finally:
                result.close()
            catalog["tensors"].append({"name": meta.name, "keys": list(meta.keys), "value": meta.value_name,
                                       "dtype": meta.dtype.name, "shape": list(meta.shape),
                                       "tile": list(meta.tile), "file": file})
        catalog["adam_steps"] = all_adam_steps(sc.db)  # the moments are tensors, exported above
        catalog["views"] = [{"name": name, "query": text} for name, text in sc.catalog.views()]
        for number, (name, sql) in enumerate(stored.ordinary_tables(sc.db)):
            file = f"table_{number}.parquet"
            stored.export_table(sc.db, name, os.path.join(folder, file))
            catalog["tables"].append({"name": name, "sql": sql, "file": file})
        catalog["duckdb_views"] = [{"name": n, "sql": s} for n, s in stored.ordinary_views(sc.db)]
    try:
        with open(catalog_path, "w", encoding="utf-8") as out:
            json.dump(catalog, out, indent=1)
    except OSError as exc:  # a full disk: said so, with what to do
        raise system_error(exc, catalog_path, writing=True) from None
    return Result(rowcount=0)


def import_database(sc: StatementContext, node: ast.ImportDatabase) -> Result:
    catalog = _read_catalog(sc, node)
    folder = node.path
    check_export_catalog(catalog, folder)  # all or nothing: no entry the loader would reject is committed
    try:
        for table in catalog["tables"]:
            sc.catalog.check_new_name(table["name"])
            stored.import_table(sc.db, table["sql"], table["name"], _file(folder, table["file"]))
        sc.catalog.forget_ordinary_tables()
        for entry in catalog["tensors"]:
            meta = sc.catalog.create_tensor(TensorMeta(entry["name"], tuple(entry["keys"]), entry["value"],
                                                       np.dtype(entry["dtype"]), tuple(entry["shape"]),
                                                       tuple(entry["tile"]), ""),
                                            internal=_is_imported_state(entry["name"], catalog["tensors"]))
            read_tiles_into(sc, meta, _file(folder, entry["file"]))
            sc.catalog.refresh_statistics(meta)
        _import_adam_steps(sc, catalog.get("adam_steps", {}), {e["name"] for e in catalog["tensors"]})
        for view in catalog["views"]:
            sc.catalog.create_view(view["name"], view["query"], False)
        for view in catalog["duckdb_views"]:
            sc.catalog.check_new_name(view["name"])
            stored.import_view(sc.db, view["sql"])
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"IMPORT DATABASE '{folder}': the export's catalog is damaged ({type(exc).__name__}: "
                        f"{exc})") from None
    finally:
        sc.catalog.forget_ordinary_tables()
    return Result(rowcount=0)


def _is_imported_state(name: str, tensors: list) -> bool:
    """Whether `name` is the optimizer state of a parameter the export also holds (trdb's own namespace)."""
    param = state_parameter(name)
    return param is not None and fold(param) in {fold(e["name"]) for e in tensors if isinstance(e.get("name"), str)}


def _import_adam_steps(sc: StatementContext, steps: dict, tensors: set) -> None:
    """Adam's step counts, each of a tensor the export holds (with its moments, imported as tensors)."""
    for param, step in steps.items():
        if param not in tensors or not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError(f"adam step {param!r}: {step!r}")
    write_adam_steps(sc.db, steps)


def _read_catalog(sc: StatementContext, node: ast.ImportDatabase) -> dict:
    path = _checked(sc, node, os.path.join(node.path, CATALOG))
    if not os.path.isfile(path):
        raise sc.bind.fail(node, f"cannot import '{node.path}': it holds no {CATALOG}",
                           hint="IMPORT DATABASE reads a directory EXPORT DATABASE wrote", error=OperationalError)
    try:
        with open(path, encoding="utf-8") as source:
            catalog = json.load(source)
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot import '{node.path}': {CATALOG} is unreadable ({exc})") from None
    if not isinstance(catalog, dict) or catalog.get("format") != FORMAT:
        raise DataError(f"cannot import '{node.path}': {CATALOG} is not a trdb export")
    return catalog


def _checked(sc: StatementContext, node, path: str) -> str:
    """`path` resolved, after DuckDB's file access settings allow it (the tiles files: read_tiles_into checks)."""
    try:
        return file_sandbox.checked(sc.db, path)
    except OperationalError as exc:
        raise sc.bind.fail(node, exc.message, hint=exc.hint, error=OperationalError) from None


def _file(folder: str, name: str) -> str:
    """A file the catalog names, which must lie in the export's directory (the catalog is user input)."""
    if not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".", ".."):
        raise ValueError(f"file name {name!r}")
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        raise OperationalError(f"IMPORT DATABASE: '{path}' is missing")
    return path
