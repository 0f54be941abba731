"""A scan of shared tuples is hashed on the wanted key columns that hold more than one value: a column
whose tuples all hold one value spreads nothing, and leaving it out lets a join meet an input hashed
without it (the MLP gradient's backward pass: an exchange of the hidden layer fewer, which on the Ray
executor is data moved between actors)."""
from __future__ import annotations

import numpy as np

from trdb.optimizer import physical_operators as po
from trdb.optimizer.physical_planner import plan_physical
from trdb.planner import logical as lp
from trdb.planner.types import Column, KeyType, TensorType

TILE = TensorType(np.dtype("float32"), (2,), (2,))
SCHEMA = (Column("i", KeyType()), Column("j", KeyType()), Column("v", TILE))


def _shared(pairs) -> lp.RowsScan:
    return lp.RowsScan([(i, j, np.ones(2, np.float32)) for i, j in pairs], SCHEMA)


def _exchanges(node) -> list:
    found = [node.spec] if isinstance(node.spec, po.Exchange) else []
    return found + [e for child in node.children for e in _exchanges(child)]


def _scans(node) -> list:
    found = [node] if isinstance(node.spec, po.RowsScan) else []
    return found + [s for child in node.children for s in _scans(child)]


def _join(left: lp.Plan, right: lp.Plan) -> lp.Plan:
    return lp.Join(left, right, "INNER", (0, 1), (0, 1), left.schema + right.schema)


def test_a_key_with_one_value_is_left_out_of_the_hash():
    scan = plan_physical(_join(_shared([(i, 0) for i in range(8)]), _shared([(i, 0) for i in range(8)])), 2)
    assert {s.partitioning.columns for s in _scans(scan)} == {(0,)}
    assert not [e for e in _exchanges(scan) if isinstance(e, po.Repartition)]


def test_keys_with_many_values_are_all_kept():
    node = plan_physical(_join(_shared([(i, j) for i in range(4) for j in range(4)]),
                               _shared([(i, j) for i in range(4) for j in range(4)])), 2)
    assert {s.partitioning.columns for s in _scans(node)} == {(0, 1)}
