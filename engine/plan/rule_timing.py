"""How long each logical rule took on a plan and whether it changed it: what EXPLAIN ANALYZE reports of the optimizer."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuleTiming:
    """One rule's run over one plan."""

    rule: str
    seconds: float
    changed: bool
