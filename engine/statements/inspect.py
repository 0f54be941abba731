"""SHOW TENSORS, SHOW VIEWS, DESCRIBE, SET / RESET / SHOW of settings (EXPLAIN is in explaining.py)."""
from __future__ import annotations

from trdb.catalog.optimizer_state import moment_names
from trdb.config.settings import SETTINGS
from trdb.execution.result import Result
from trdb.kernels.device_choice import backend_for
from trdb.parser import ast
from trdb.plan.types import Column, ScalarType
from trdb.statements.context import StatementContext
from trdb.statements.listings import shown
from trdb.statements.names import does_not_exist, state_owner

TEXT = ScalarType(str)


def _text_result(names: tuple[str, ...], rows: list[tuple]) -> Result:
    schema = tuple(Column(n, TEXT) for n in names)
    return Result(rows=rows, schema=schema, rowcount=len(rows))


def show_tensors(sc: StatementContext, node: ast.ShowTensors) -> Result:
    """The user's tensors (optimizer state is listed by DESCRIBE of its parameter); `location` is where an
    external tensor's Parquet dataset lives (NULL: stored in the database)."""
    rows = [(m.name, ", ".join(m.keys), str(list(m.shape)), str(list(m.tile)), m.dtype.name, m.tuple_count,
             float(f'{m.density:.6g}'), m.location or None)
            for m in sc.catalog.tensors() if state_owner(sc.catalog, m.name) is None]
    return _text_result(("name", "keys", "shape", "tile", "dtype", "tuples", "density", "location"), rows)


def show_views(sc: StatementContext, node: ast.ShowViews) -> Result:
    return _text_result(("name", "query"), [(n, q) for n, q in sc.catalog.views()])


def _value_row(name: str, meta, role: str) -> tuple:
    return (name, f"TENSOR({meta.dtype.name})", role, str(list(meta.shape)), str(list(meta.tile)),
            meta.tuple_count, float(f'{meta.density:.6g}'), meta.csr_tuples)


def describe(sc: StatementContext, node: ast.Describe) -> Result:
    names = ("column_name", "column_type", "role", "shape", "tile", "tuples", "density", "csr_tuples")
    meta = sc.catalog.tensor(node.name)
    if meta is not None:
        rows = [(k, "BIGINT", "key", g, t, None, None, None) for k, g, t in zip(meta.keys, meta.grid, meta.tile)]
        rows.append(_value_row(meta.value_name, meta, "value"))
        for state_name in moment_names(meta.name):  # Adam's moments belong to their parameter: listed here, not by SHOW
            state = sc.catalog.tensor(state_name)
            if state is not None:
                rows.append(_value_row(state.name, state, "optimizer state"))
        return _text_result(names, rows)
    view = sc.catalog.view(node.name)
    if view is None:
        raise does_not_exist(sc.catalog, None, node.name)
    plan = sc.bind_table(ast.TableRef(node.name, span=node.span))
    return _schema_rows(plan.schema)


def _schema_rows(schema) -> Result:
    names = ("column_name", "column_type", "role", "shape", "tile", "tuples", "density", "csr_tuples")
    rows = [(c.name, str(c.type), "key" if c.is_key else "value",
             str(list(c.type.extent)) if c.is_tensor else None,
             str(list(c.type.tile)) if c.is_tensor else None, None, None, None) for c in schema]
    return _text_result(names, rows)


def describe_query(sc: StatementContext, node: ast.DescribeQuery) -> Result:
    """The schema of a query's result (DuckDB's DESCRIBE SELECT ...), bound but not run."""
    return _schema_rows(sc.bind_query(node.query).plan.schema)


def set_setting(sc: StatementContext, node: ast.SetSetting) -> Result:
    value = sc.constant(node.value)
    if node.name.lower() == "device":
        backend_for(str(value).lower())  # 'gpu' without a GPU is refused now, not at the next query
    sc.settings.set(node.name, value)
    return Result(rowcount=0)


def reset_setting(sc: StatementContext, node: ast.ResetSetting) -> Result:
    sc.settings.reset(node.name)
    return Result(rowcount=0)


def show_setting(sc: StatementContext, node: ast.ShowSetting) -> Result:
    """SHOW setting; SHOW of a tensor or view describes it, as DuckDB's SHOW of a table does."""
    if node.name.lower() not in SETTINGS and (sc.catalog.has_tensor(node.name) or sc.catalog.view(node.name)):
        return describe(sc, ast.Describe(node.name, node.span))
    return _text_result((node.name.lower(),), [(shown(sc.settings.get(node.name)),)])
