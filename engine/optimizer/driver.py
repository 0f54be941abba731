"""The optimizer driver: runs the logical rewrite rules in one ordered list, timed and checked."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from trdb.config.settings import OPTIMIZER_RULES
from trdb.errors import InternalError, ProgrammingError, QueryCancelled
from trdb.optimizer.rules.aggregate_pushdown import aggregate_pushdown
from trdb.optimizer.rules.constant_folding import constant_folding
from trdb.optimizer.rules.dense_products import dense_products
from trdb.optimizer.rules.join_ordering import join_ordering
from trdb.optimizer.rules.kernel_fusion import kernel_fusion
from trdb.optimizer.rules.nested_sums import nested_sums
from trdb.optimizer.rules.outer_join_elimination import outer_join_elimination
from trdb.optimizer.rules.predicate_pushdown import predicate_pushdown
from trdb.optimizer.rules.projection_pruning import projection_pruning
from trdb.optimizer.rules.redundant_rekey_removal import redundant_rekey_removal
from trdb.optimizer.rules.single_row_groups import single_row_groups
from trdb.plan import logical as lp
from trdb.plan.rule_timing import RuleTiming
from trdb.plan.types import Schema

Rule = Callable[[lp.Plan, "RuleContext"], lp.Plan]

# Folding first, so that later rules see simple predicates; pushdown before join ordering (which
# needs the join conditions as keys) and before pruning and fusion; outer join elimination before
# join ordering (which reorders inner joins only) and before fusion (it reads the projection right
# above the join, and a fused one may hide kernels that do not vanish),
# so that filters land under the projections that fusion merges; pruning last, after aggregate
# pushdown has decided which columns the new aggregates read; nested sums after single-row groups (an inner
# aggregate that became a projection is looked through); dense products after all of them, on the
# joins and aggregates as they will run.
RULES: tuple[Rule, ...] = (constant_folding, predicate_pushdown, outer_join_elimination, join_ordering,
                           redundant_rekey_removal, single_row_groups, nested_sums, kernel_fusion,
                           aggregate_pushdown, projection_pruning, dense_products)
RULE_NAMES: tuple[str, ...] = tuple(rule.__name__ for rule in RULES)
if RULE_NAMES != OPTIMIZER_RULES:  # the names SET disabled_rules accepts are declared with the settings
    raise ImportError(f"optimizer rules {RULE_NAMES} differ from config.settings.OPTIMIZER_RULES")
MAX_PASSES = 4
# Operators a plan may hold, each subplan counted once per reader: the rules and the physical planner walk
# plans as trees, so a subplan read twice costs them twice (those shared as common subplans are scans by
# then). A statement past this would take minutes or hours to plan; it is refused instead.
MAX_PLAN_OPERATORS = 50_000


@dataclass
class RuleContext:
    """What a rule may consult: the catalog (statistics) and the session settings.

    `keep_zero_tuples`: whoever reads the plan's output tells a tuple holding zero tiles from an
    absent one (UPDATE's new tiles, MINIMIZE's gradients, a subplan shared by other plans), so no
    rule may drop such tuples; otherwise the result is a tensor relation, where they are the same.
    """

    catalog: Any = None
    settings: Any = None
    timings: list[RuleTiming] = field(default_factory=list)
    keep_zero_tuples: bool = False
    interrupted: Optional[threading.Event] = None  # set when the statement is cancelled
    states: dict[str, int] = field(default_factory=dict)  # search states each rule visited

    def check(self) -> None:
        """Raise QueryCancelled once the statement has been cancelled; rules call it while they search."""
        if self.interrupted is not None and self.interrupted.is_set():
            raise QueryCancelled("the statement was cancelled")

    def count_states(self, rule: str, states: int) -> None:
        self.states[rule] = self.states.get(rule, 0) + states


def disabled_rules(settings: Any) -> frozenset[str]:
    text = settings.get("disabled_rules") if settings is not None else ""
    return frozenset(name for name in (text or "").split(",") if name)


def schema_signature(schema: Schema) -> tuple:
    """What no rule may change about a plan's output: column count, kinds, dtypes and tile shapes."""
    return tuple((type(c.type).__name__, getattr(c.type, "dtype", None), getattr(c.type, "tile", None))
                 for c in schema)


def unfolded_operators(plan: lp.Plan, limit: int, check: Callable[[], None] = lambda: None) -> int:
    """How many operators `plan` holds as a tree (a subplan read twice counted twice), counted up to a
    little past `limit`; each subplan is visited once, and `check` (cancellation) is called as it goes."""
    sizes: dict[int, int] = {}
    stack = [(plan, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in sizes:
            continue
        if ready:
            sizes[id(node)] = min(limit + 1, 1 + sum(sizes[id(child)] for child in node.inputs))
            if len(sizes) % 1024 == 0:
                check()
            continue
        stack.append((node, True))
        stack.extend((child, False) for child in node.inputs if id(child) not in sizes)
    return sizes[id(plan)]


def check_plan_size(plan: lp.Plan, limit: int, what: str, check: Callable[[], None] = lambda: None) -> None:
    """Refuse `plan` when, unfolded, it holds more than `limit` operators (`what` names the work refused)."""
    if unfolded_operators(plan, limit, check) > limit:
        raise ProgrammingError(f"the statement is too large to {what}: its plan holds more than {limit:,} "
                               "operators once the subqueries, CTEs and views it reads more than once are "
                               "counted once per reader",
                               hint="store intermediate results with CREATE TENSOR ... AS and read those")


def optimize(plan: lp.Plan, settings: Any = None, catalog: Any = None,
             context: Optional[RuleContext] = None, keep_zero_tuples: bool = False) -> lp.Plan:
    """The rewritten plan: every enabled rule in order, repeated until a pass changes nothing."""
    context = context or RuleContext(catalog, settings, keep_zero_tuples=keep_zero_tuples)
    check_plan_size(plan, MAX_PLAN_OPERATORS, "plan", context.check)
    skipped = disabled_rules(settings)
    rules = [rule for rule in RULES if rule.__name__ not in skipped]
    expected = schema_signature(plan.schema)
    for _ in range(MAX_PASSES):
        changed = False
        for rule in rules:
            context.check()
            started = time.perf_counter()
            rewritten = rule(plan, context)
            context.timings.append(RuleTiming(rule.__name__, time.perf_counter() - started, rewritten is not plan))
            if rewritten is not plan:
                _check_schema(rule.__name__, expected, rewritten)
                plan, changed = rewritten, True
        if not changed:
            break
    return plan


def _check_schema(name: str, expected: tuple, plan: lp.Plan) -> None:
    actual = schema_signature(plan.schema)
    if actual != expected:
        raise InternalError(f"optimizer rule {name} changed the plan's output columns: "
                            f"{expected} became {actual}")
