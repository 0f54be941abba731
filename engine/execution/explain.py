"""EXPLAIN text: the physical operator tree, indented, with run-time metrics under ANALYZE."""
from __future__ import annotations

from trdb.execution.operator import PhysicalOperator


def explain_lines(operator: PhysicalOperator, analyze: bool = False, depth: int = 0) -> list[str]:
    line = "  " * depth + ("-> " if depth else "") + operator.describe()
    if analyze:
        line += f"  [actual tuples={operator.metrics.tuples}, time={operator.metrics.seconds * 1000:.2f} ms]"
    lines = [line]
    for child in operator.children:
        lines.extend(explain_lines(child, analyze, depth + 1))
    return lines
