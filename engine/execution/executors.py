"""Which executor runs a plan: threads in this process, or the actors of a Ray cluster."""
from __future__ import annotations

from trdb.execution.executor import Execution
from trdb.execution.operators.operator import ExecContext
from trdb.plan.physical import PhysicalNode


def start_execution(root: PhysicalNode, ctx: ExecContext, settings, keep: bool = False) -> "Execution":
    """The execution of `root` by the executor the settings name: local threads, or a Ray cluster.
    `keep`: its tuples are kept for other plans to read (a shared subplan's; see `keep_result`)."""
    if settings.executor == "ray":
        from trdb.execution.ray.driver.execution import RayExecution  # Ray is optional: imported only when used

        return RayExecution(root, ctx, settings, keep)
    return Execution(root, ctx)
