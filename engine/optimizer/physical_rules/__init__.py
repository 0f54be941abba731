"""Physical rules: the named ways of placing exchanges around a join or an aggregate, tried in this order by the
physical planner, which keeps the cheapest; each skippable by name through `SET disabled_rules`, as a logical rule is."""
from __future__ import annotations

from trdb.config.settings import PHYSICAL_RULES
from trdb.optimizer.physical_rules.banded_aggregate import banded_aggregate
from trdb.optimizer.physical_rules.broadcast_left_join import broadcast_left_join
from trdb.optimizer.physical_rules.broadcast_right_join import broadcast_right_join
from trdb.optimizer.physical_rules.co_partitioned_by_right_join import co_partitioned_by_right_join
from trdb.optimizer.physical_rules.co_partitioned_join import co_partitioned_join
from trdb.optimizer.physical_rules.two_phase_aggregate import two_phase_aggregate

# a join's strategies in the order they are tried (the first of equally cheap ones wins)
JOIN_RULES = (co_partitioned_join, co_partitioned_by_right_join, broadcast_right_join, broadcast_left_join)
AGGREGATE_RULES = (two_phase_aggregate, banded_aggregate)
PHYSICAL_RULE_NAMES = tuple(rule.__name__ for rule in JOIN_RULES + AGGREGATE_RULES)
if PHYSICAL_RULE_NAMES != PHYSICAL_RULES:  # the names SET disabled_rules accepts are declared with the settings
    raise ImportError(f"physical rules {PHYSICAL_RULE_NAMES} differ from config.settings.PHYSICAL_RULES")
