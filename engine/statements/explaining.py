"""EXPLAIN [ANALYZE] [(FORMAT text | json | dot)] of every statement that runs a query.

A SELECT has one plan. CREATE TENSOR ... AS, INSERT ... query and UPDATE show the plan of the query
they store, DELETE ... WHERE the plan finding the tuples it removes; MINIMIZE shows what each of its
steps runs (the loss and one gradient per parameter, their common forward work shared). Under
ANALYZE those queries run, but nothing is written: EXPLAIN never changes the database.
"""
from __future__ import annotations

from typing import Optional

from trdb.errors import NotSupportedError
from trdb.execution.explain import explain_lines, rule_timings, shipped_total, work_total
from trdb.execution.explain_formats import Section, plans_dot, plans_json
from trdb.execution.result import Result
from trdb.optimizer.driver import RuleContext
from trdb.parser import ast
from trdb.plan import logical as lp
from trdb.plan.types import Column, ScalarType
from trdb.statements.context import StatementContext
from trdb.statements.dml import delete_query, update_query
from trdb.statements.minimize import step_plans

_TAKES = "SELECT, CREATE TENSOR ... AS, INSERT INTO ... query, UPDATE, DELETE ... WHERE or MINIMIZE"


def explain(sc: StatementContext, node: ast.Explain) -> Result:
    rules = RuleContext(sc.catalog, sc.settings)
    statement = node.statement
    sc.pipeline.analyze = node.analyze  # the operators count their kernels' work, which it reports
    sections = [_section(sc, title, plan, shared, node.analyze, rules)
                for title, plan, shared in _plans(sc, statement)]
    text = sc.text[statement.span.start:statement.span.end] if statement.span.end else type(statement).__name__
    if node.format == "json":
        rows = [(plans_json(text, sections, node.analyze, rules.timings),)]
    elif node.format == "dot":
        rows = [(plans_dot(text, sections),)]
    else:
        rows = [(line,) for line in _text_lines(sections)]
        if node.analyze:
            executions = [e for s in sections for e in s.executions()]
            rows.append((work_total(executions),))
            shipped = shipped_total(executions)
            if shipped is not None:
                rows.append((shipped,))
            rows.append((rule_timings(rules.timings),))
    return Result(rows=rows, schema=(Column("plan", ScalarType(str)),), rowcount=len(rows))


def _plans(sc: StatementContext, statement) -> list[tuple[Optional[str], lp.Plan, object]]:
    """(title, logical plan, shared work) of each query the statement runs."""
    shared = sc.pipeline.shared_work(carried=False)
    if isinstance(statement, ast.QueryStatement):
        return [(None, sc.bind_query(statement.query).plan, shared)]
    if isinstance(statement, ast.CreateTensorAs):
        return [(f"CREATE TENSOR {statement.name} AS", sc.bind_query(statement.query).plan, shared)]
    if isinstance(statement, ast.InsertQuery):
        target = sc.catalog.require_tensor(statement.table)
        return [(f"INSERT INTO {target.name}", sc.bind_query(statement.query).plan, shared)]
    if isinstance(statement, ast.Update):
        target = sc.catalog.require_tensor(statement.table)
        return [(f"UPDATE {target.name}", sc.bind_query(update_query(target, statement)).plan, shared)]
    if isinstance(statement, ast.Delete) and statement.where is not None:
        target = sc.catalog.require_tensor(statement.table)
        return [(f"DELETE FROM {target.name}", sc.bind_query(delete_query(target, statement)).plan, shared)]
    if isinstance(statement, ast.Minimize):
        return _minimize_plans(sc, statement, shared)
    raise sc.bind.fail(statement, f"EXPLAIN takes {_TAKES}", error=NotSupportedError)


def _minimize_plans(sc: StatementContext, statement: ast.Minimize, shared) -> list:
    loss, params, gradients = step_plans(sc, statement)
    shared.expect([loss, *gradients])  # as MINIMIZE runs them: the forward pass once for all
    step = f"MINIMIZE {statement.view}, each step"
    return [(f"{step}: the loss", loss, shared)] + \
        [(f"{step}: the gradient of {p.name}", g, shared) for p, g in zip(params, gradients)]


def _section(sc: StatementContext, title: Optional[str], plan: lp.Plan, shared, analyze: bool,
             rules: RuleContext) -> Section:
    run = sc.pipeline.run(plan, shared, keep_zero_tuples=_writes_every_tuple(title), execute=analyze, rules=rules)
    return Section(title, tuple((s.node, s.execution) for s in run.shared), (run.main.node, run.main.execution))


def _writes_every_tuple(title: Optional[str]) -> bool:
    """Whether the section's statement runs its query keeping tuples whose tiles come out zero, as the statement
    itself does (zeros are values: a write keeps them; MINIMIZE's gradients keep them for Adam)."""
    return title is not None and title.startswith(("UPDATE", "CREATE TENSOR", "INSERT INTO")) \
        or title is not None and "the gradient of" in title


def _text_lines(sections: list[Section]) -> list[str]:
    """The plans as indented trees: each shared subplan once (they run first), then the plan reading them."""
    lines = []
    for section in sections:
        indent = ""
        if section.title is not None:
            lines.append(f"{section.title} runs:")
            indent = "  "
        for number, (node, execution) in enumerate(section.shared, 1):
            lines.append(f"{indent}Shared subplan {number} (runs once, first; read below by a RowsScanExec):")
            lines.extend(f"{indent}  {line}" for line in explain_lines(node, execution))
        if section.shared:
            lines.append(f"{indent}Plan:")
        inner = indent + ("  " if section.shared else "")
        lines.extend(inner + line for line in explain_lines(*section.main))
    return lines
