"""EXPLAIN text: the physical plan as an indented tree with estimates, and actual metrics under ANALYZE."""
from __future__ import annotations

from typing import Optional, Sequence

from trdb.execution.executor import Execution
from trdb.plan.physical import PhysicalNode
from trdb.plan.rule_timing import RuleTiming


def _quantity(value: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}"


def _estimates(node: PhysicalNode) -> str:
    parts = [f"cost={_quantity(node.own_cost)}", f"tuples={_quantity(node.estimate.rows)}"]
    if node.estimate.flops and node.exchange is None:
        parts.append(f"flops={_quantity(node.estimate.flops)}")
    parts.append(f"bytes={_quantity(node.estimate.bytes)}")
    if node.exchange is not None:
        parts.append(f"moves={_quantity(node.moved_bytes)}B")
    if node.spill:
        parts.append(f"spill={_quantity(node.spill)}B")
    return "est. " + " ".join(parts)


def _actuals(node: PhysicalNode, execution: Execution) -> str:
    operators = execution.instances.get(id(node), [])
    tuples = sum(op.metrics.tuples for op in operators)
    seconds = max((op.metrics.seconds for op in operators), default=0.0)
    text = f"actual tuples={tuples} time={seconds * 1000:.2f}ms"
    memory = sum(op.metrics.peak_memory for op in operators)
    spilled = sum(op.metrics.spilled_bytes for op in operators)
    if memory:
        text += f" memory={_quantity(memory)}B"
    if spilled:
        text += f" spilled={_quantity(spilled)}B"
    channel = execution.channels.get(id(node))
    if channel is not None:
        text += f" moved={channel.tuples} tuples/{_quantity(channel.bytes)}B"
    return text + _actual_work(operators)


# ---- executed work (EXPLAIN ANALYZE): FLOPs and bytes counted where kernels ran (execution/work.py) ----

def _actual_work(operators: Sequence) -> str:
    """' flops=… kernel_bytes=…' for an operator whose kernels ran, summed over its partitions."""
    flops = sum(op.metrics.work.flops for op in operators)
    moved = sum(op.metrics.work.bytes for op in operators)
    if not flops and not moved:
        return ""
    return f" flops={_quantity(flops)} kernel_bytes={_quantity(moved)}B"


def executed_work(executions: Sequence[Execution]) -> tuple[int, int]:
    """(FLOPs, kernel bytes) of every operator of these executions (a statement's shared subplans and plan)."""
    flops = moved = 0
    for execution in executions:
        for operators in execution.instances.values():
            flops += sum(op.metrics.work.flops for op in operators)
            moved += sum(op.metrics.work.bytes for op in operators)
    return flops, moved


def work_total(executions: Sequence[Execution]) -> str:
    """The statement's line of executed work: FLOPs (2*m*n*k a product, one an element otherwise) and
    the bytes its kernels read and wrote."""
    flops, moved = executed_work(executions)
    return (f"Executed work: flops={_quantity(flops)} ({flops}) kernel_bytes={_quantity(moved)}B ({moved}); "
            "a product counts 2*m*n*k, an elementwise kernel or a tile added into a sum one per element")


def shipped_total(executions: Sequence[Execution]) -> Optional[str]:
    """The statement's line of what the driver sent to Ray actors, or None (the local executor)."""
    shipped = [e.shipped for e in executions if getattr(e, "shipped", None) is not None]
    if not shipped:
        return None
    size, stored = sum(s.bytes for s in shipped), sum(s.tensors for s in shipped)
    return (f"Sent to Ray workers: {_quantity(size)}B ({size}), of stored tensors {_quantity(stored)}B; "
            "tensor partitions shipped "
            f"{sum(s.kept for s in shipped)}, kept from earlier statements {sum(s.reused for s in shipped)}; "
            f"scans fed from the driver {sum(s.fed for s in shipped)}")


def explain_lines(node: PhysicalNode, execution: Optional[Execution] = None, depth: int = 0) -> list[str]:
    name = f"{node.operator}({node.detail})" if node.detail else node.operator
    line = "  " * depth + ("-> " if depth else "") + name + f"  [{_estimates(node)}]"
    if execution is not None:
        line += f"  [{_actuals(node, execution)}]"
    lines = [line]
    for child in node.children:
        lines.extend(explain_lines(child, execution, depth + 1))
    return lines


def rule_timings(timings: Sequence[RuleTiming]) -> str:
    """One line: each optimizer rule's time over all passes, a star where it changed the plan."""
    seconds: dict[str, float] = {}
    changed: set[str] = set()
    for timing in timings:
        seconds[timing.rule] = seconds.get(timing.rule, 0.0) + timing.seconds
        if timing.changed:
            changed.add(timing.rule)
    parts = [f"{rule}{'*' if rule in changed else ''} {s * 1000:.2f}ms" for rule, s in seconds.items()]
    return f"Optimizer rules ({sum(seconds.values()) * 1000:.2f}ms, * changed the plan): " + ", ".join(parts)
