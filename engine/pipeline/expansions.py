"""The binder's EINSUM and GRAD builders, from the layers above it: the optimizer's decomposition and autodiff."""
from __future__ import annotations

from trdb.autodiff.gradient import gradient_plan
from trdb.optimizer.einsum_decomposition import bind_einsum
from trdb.planner.expansion import Expansions

QUERY_EXPANSIONS = Expansions(einsum=bind_einsum, gradient=gradient_plan)
