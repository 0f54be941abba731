"""EXPLAIN (FORMAT json) and EXPLAIN (FORMAT dot): the physical plans as JSON for tools and as Graphviz.

Both carry what the text form shows: per operator its name, detail, the optimizer's estimates and,
under ANALYZE, the actual metrics. A statement may run several plans (MINIMIZE runs the loss and one
gradient per parameter); each is a `Section` with its title, the shared subplans it reads and its plan.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Optional, Sequence

from trdb.execution.executor import Execution
from trdb.plan.physical import PhysicalNode
from trdb.plan.rule_timing import RuleTiming

Stage = tuple[PhysicalNode, Optional[Execution]]


@dataclass(frozen=True)
class Section:
    """One plan of a statement: a title (None for a plain query), the shared subplans first, then the plan."""

    title: Optional[str]
    shared: tuple[Stage, ...]
    main: Stage

    def executions(self) -> list:
        """The executions of its plans (EXPLAIN ANALYZE), shared subplans first."""
        return [execution for _, execution in (*self.shared, self.main) if execution is not None]


def _number(value: float) -> float | int:
    """JSON has no inf or NaN (RFC 8259): an unbounded estimate is written as the largest double."""
    if not math.isfinite(value):
        return 1.7976931348623157e308 if value > 0 else 0
    return int(value) if float(value).is_integer() else round(value, 3)


def estimates(node: PhysicalNode) -> dict:
    found = {"cost": node.own_cost, "tuples": node.estimate.rows, "flops": node.estimate.flops,
             "bytes": node.estimate.bytes}
    if node.exchange is not None:
        found["moved_bytes"] = node.moved_bytes
    if node.spill:
        found["spill_bytes"] = node.spill
    return {name: _number(value) for name, value in found.items()}


def actuals(node: PhysicalNode, execution: Execution) -> dict:
    operators = execution.instances.get(id(node), [])
    found = {"tuples": sum(op.metrics.tuples for op in operators),
             "seconds": round(max((op.metrics.seconds for op in operators), default=0.0), 6),
             "peak_memory_bytes": sum(op.metrics.peak_memory for op in operators),
             "spilled_bytes": sum(op.metrics.spilled_bytes for op in operators)}
    channel = execution.channels.get(id(node))
    if channel is not None:
        found.update(moved_tuples=channel.tuples, moved_bytes=channel.bytes)
    return found


def node_json(node: PhysicalNode, execution: Optional[Execution]) -> dict:
    out = {"operator": node.operator, "detail": node.detail, "estimates": estimates(node)}
    if execution is not None:
        out["actual"] = actuals(node, execution)
    out["children"] = [node_json(child, execution) for child in node.children]
    return out


def plans_json(statement: str, sections: Sequence[Section], analyze: bool,
               timings: Sequence[RuleTiming] = ()) -> str:
    """One JSON document: the statement's plans, each with its shared subplans, and the optimizer's rule times."""
    document = {"statement": statement, "analyze": analyze, "plans": [
        {"title": s.title, "shared": [node_json(*stage) for stage in s.shared], "plan": node_json(*s.main)}
        for s in sections]}
    if analyze:
        document["optimizer_rules"] = [{"rule": t.rule, "seconds": round(t.seconds, 6), "changed": t.changed}
                                       for t in timings]
    return json.dumps(document, indent=2, allow_nan=False)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _label(node: PhysicalNode, execution: Optional[Execution]) -> str:
    lines = [node.operator] + ([node.detail] if node.detail else [])
    lines.append(" ".join(f"{k}={v}" for k, v in estimates(node).items() if v or k != "flops"))
    if execution is not None:
        lines.append("actual " + " ".join(f"{k}={v}" for k, v in actuals(node, execution).items() if v))
    return "\n".join(lines)


class _DotWriter:
    """Numbers the nodes of every plan and writes them with edges from each input to its consumer."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0

    def tree(self, node: PhysicalNode, execution: Optional[Execution], indent: str) -> str:
        name = f"n{self.count}"
        self.count += 1
        shape = "box, style=rounded" if node.exchange is None else "box, style=dashed"
        self.lines.append(f"{indent}{name} [shape={shape}, label={_quote(_label(node, execution))}];")
        for child in node.children:
            self.lines.append(f"{indent}{self.tree(child, execution, indent)} -> {name};")
        return name

    def cluster(self, title: str, stage: Stage) -> None:
        self.lines.append(f"  subgraph cluster_{self.count} {{")
        self.lines.append(f"    label={_quote(title)};")
        self.tree(*stage, "    ")
        self.lines.append("  }")


def plans_dot(statement: str, sections: Sequence[Section]) -> str:
    """A Graphviz digraph: one cluster per plan (and per shared subplan), data flowing upward to the result."""
    writer = _DotWriter()
    for section in sections:
        prefix = f"{section.title}: " if section.title else ""
        for number, stage in enumerate(section.shared, 1):
            writer.cluster(f"{prefix}shared subplan {number} (runs once, first)", stage)
        writer.cluster(section.title or "plan", section.main)
    header = ["digraph plan {", f"  label={_quote(statement)};", "  labelloc=t;", "  rankdir=BT;",
              '  node [fontname="monospace", fontsize=10];']
    return "\n".join(header + writer.lines + ["}"]) + "\n"
