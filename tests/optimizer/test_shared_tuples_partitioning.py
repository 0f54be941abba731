"""Partitionings that need no exchange: a scan of shared tuples is hashed on the wanted key columns that
hold more than one value (a column whose tuples all hold one value spreads nothing, and leaving it out
lets a join meet an input hashed without it), and a projection that drops the key its input is hashed on
keeps the partitioning by a column holding the same key (a key an inner join made equal, a lineage
copy). In the MLP gradient's backward pass that is two exchanges of the hidden layer fewer, which on
the Ray executor are data moved between actors."""
from __future__ import annotations

import numpy as np

from helpers.mlp_views import load_small_mlp, mlp_grad_w1
from trdb.optimizer.physical_planner import plan_physical
from trdb.plan import logical as lp
from trdb.plan import physical_operators as po
from trdb.plan.types import Column, KeyType, TensorType

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


def test_the_mlp_backward_pass_moves_no_hidden_layer_tuples(cur):
    """d_hidden = (d_out @ W2ᵀ) * (H > 0) is computed where H's tuples are (its row tile's worker): the
    outer product's output keeps the partitioning by the row key, which its projection holds as a lineage
    column (the same key slot), and H's scan is hashed on that key alone (W1 has one column of tiles)."""
    t = load_small_mlp(cur, rows=16, w1_tile=(4, 6), w2_tile=(6, 1))
    cur.execute("SET workers = 2")
    plan = [row[0] for row in cur.execute("EXPLAIN SELECT * FROM GRAD(loss, W1)").fetchall()]
    backward = [n for n, line in enumerate(plan) if "(_grad2 * (v > 0))" in line or "MATMUL(_grad2," in line]
    assert len(backward) == 2 and not any("RepartitionExec" in plan[n - 1] for n in backward)
    got = cur.execute("SELECT * FROM GRAD(loss, W1)").fetch_tensor()
    np.testing.assert_allclose(got, mlp_grad_w1(t), rtol=1e-4, atol=1e-4)
