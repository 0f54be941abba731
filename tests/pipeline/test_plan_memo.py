"""MINIMIZE's plans remembered: a statement's first step plans, so does a connection's first MINIMIZE."""
from __future__ import annotations

import gc
import weakref

import numpy as np
from tests.pipeline.test_query_pipeline import MLP

import trdb
import trdb.pipeline.query as query
from trdb.pipeline.plan_memo import PlanMemo
from trdb.plan import logical as lp
from trdb.plan import physical_operators as po
from trdb.plan.types import Column, KeyType, TensorType
from trdb.planner.binder import Binder


class Tuples(list):
    """A list that can be watched with a weak reference."""


SCHEMA = (Column("i", KeyType()), Column("v", TensorType(np.dtype("float32"), (2,), (2,))))


def _scan(keys) -> lp.RowsScan:
    return lp.RowsScan(Tuples((k, np.ones(2, np.float32)) for k in keys), SCHEMA)


def _rows_read(node) -> list:
    found = [node.spec.rows] if isinstance(node.spec, po.RowsScan) else []
    return found + [rows for child in node.children for rows in _rows_read(child)]


def _count_planning(monkeypatch) -> list:
    planned = []
    original = query.plan_physical

    def counting(*args, **kwargs):
        planned.append(1)
        return original(*args, **kwargs)
    monkeypatch.setattr(query, "plan_physical", counting)
    return planned


def _mlp_cursor():
    cur = trdb.connect().cursor()
    for statement in MLP:
        cur.execute(statement)
    return cur


def test_minimize_plans_its_first_step_only(monkeypatch):
    planned = _count_planning(monkeypatch)
    one = _mlp_cursor().execute("MINIMIZE loss WRT (W) WITH (learning_rate = 0.001, steps = 1)").fetchall()
    first = len(planned)
    planned.clear()
    three = _mlp_cursor().execute("MINIMIZE loss WRT (W) WITH (learning_rate = 0.001, steps = 3)").fetchall()
    assert first > 1 and len(planned) == first  # steps 2 and 3 reuse step 1's plans
    assert three[0] == one[0] and three[2][1] < three[0][1]


def test_a_connections_later_minimize_plans_nothing_until_a_setting_changes(monkeypatch):
    cur = _mlp_cursor()
    step = "MINIMIZE loss WRT (W) WITH (learning_rate = 0.001, steps = 1)"
    losses = [cur.execute(step).fetchall()[0][1]]
    planned = _count_planning(monkeypatch)
    losses += [cur.execute(step).fetchall()[0][1] for _ in range(2)]  # W has new versions, equal statistics
    assert planned == [] and losses[2] < losses[1] < losses[0]
    cur.execute("SET workers = 3")
    cur.execute(step).fetchall()
    assert planned  # planned again: the settings are part of the key


def test_a_connections_later_minimize_expands_nothing(monkeypatch):
    cur = _mlp_cursor()
    step = "MINIMIZE loss WRT (W) WITH (learning_rate = 0.001, steps = 1)"
    cur.execute(step).fetchall()
    expanded = []
    original = query.expand
    monkeypatch.setattr(query, "expand", lambda *args: expanded.append(1) or original(*args))
    cur.execute(step).fetchall()
    assert expanded == []  # its plans were expanded when bound, and are known by identity
    cur.execute("SET workers = 3")
    cur.execute(step).fetchall()
    assert expanded  # expanded (and planned) again for the new workers


def test_a_memo_hit_reads_the_new_tuples_and_keeps_none_alive():
    memo = PlanMemo()
    plan = _scan([0, 1])
    found, slot = memo.lookup(plan, False)
    assert found is None
    node = query.plan_physical(plan, 2)
    watched = weakref.ref(plan.rows)
    memo.put(slot, node)
    del node, plan, slot
    gc.collect()
    assert watched() is None  # the memo holds no tuples

    again = _scan([5, 6])
    found, slot = memo.lookup(again, False)
    assert slot is None and len(_rows_read(found)) == 1 and _rows_read(found)[0] is again.rows


def test_other_statistics_plan_again():
    memo = PlanMemo()
    plan = _scan([0, 1])
    memo.put(memo.lookup(plan, False)[1], query.plan_physical(plan, 2))
    for other in (_scan([0, 1, 2]), _scan([0, 0]), _scan([0, None])):  # more tuples, fewer keys, a NULL key
        assert memo.lookup(other, False)[0] is None
    assert memo.lookup(plan, True)[0] is None  # zero tuples kept or not: another plan


def _count_binding(monkeypatch) -> list:
    bound = []
    original = Binder.bind_grad

    def counting(self, node):
        bound.append(1)
        return original(self, node)
    monkeypatch.setattr(Binder, "bind_grad", counting)
    return bound


def test_a_connections_later_minimize_binds_nothing_until_the_catalog_changes(monkeypatch):
    cur = _mlp_cursor()
    step = "MINIMIZE loss WRT (W) WITH (learning_rate = 0.001, steps = 1)"
    cur.execute(step).fetchall()
    bound = _count_binding(monkeypatch)
    cur.execute(step).fetchall()
    assert bound == []  # W was written (a new data version) with the statistics it was bound with
    W = cur.execute("SELECT * FROM W").fetch_tensor()
    X = cur.execute("SELECT * FROM X").fetch_tensor()
    cur.execute("CREATE OR REPLACE VIEW loss AS SELECT SUM(SUMSQ(h.v)) AS v FROM h")  # no RELU now
    cur.execute(step).fetchall()
    assert bound  # bound again: a view changed
    np.testing.assert_allclose(cur.execute("SELECT * FROM W").fetch_tensor(),
                               W - 0.001 * 2 * X.T @ (X @ W), rtol=1e-4, atol=1e-4)
    bound.clear()
    cur.execute("UPDATE W SET v = v * 0 WHERE i = 0")  # other statistics: half of W's tiles hold zeros only
    cur.execute(step).fetchall()
    assert bound


def test_a_grad_after_a_write_binds_nothing_until_statistics_or_the_catalog_change(monkeypatch):
    cur = _mlp_cursor()
    grad = "SELECT * FROM GRAD(loss, W)"

    def expected(relu: bool = True):
        X, W = (cur.execute(f"SELECT * FROM {name}").fetch_tensor() for name in ("X", "W"))
        H = X @ W
        d_h = 2 * np.maximum(H, 0) * (H > 0) if relu else 2 * H
        return X.T @ d_h  # a tile of zeros is present (zeros are values): it gets its gradient
    cur.execute(grad).fetch_tensor()
    bound = _count_binding(monkeypatch)
    cur.execute("UPDATE W SET v = W.v * 1.5")  # a new data version, the same statistics
    np.testing.assert_allclose(cur.execute(grad).fetch_tensor(), expected(), rtol=1e-4, atol=1e-4)
    assert bound == []  # differentiated once: the new W is read through the remembered plan
    cur.execute("UPDATE W SET v = v * 0 WHERE i = 0")  # other statistics: a tile of zeros (stored, nnz 0)
    np.testing.assert_allclose(cur.execute(grad).fetch_tensor(), expected(), rtol=1e-4, atol=1e-4)
    assert len(bound) == 1
    cur.execute("CREATE OR REPLACE VIEW loss AS SELECT SUM(SUMSQ(h.v)) AS v FROM h")  # a view changed
    np.testing.assert_allclose(cur.execute(grad).fetch_tensor(), expected(relu=False), rtol=1e-4, atol=1e-4)
    assert len(bound) == 2
    cur.execute("SELECT * FROM GRAD(loss, W) AS G WHERE G.i = ?", [1]).fetchall()
    cur.execute("SELECT * FROM GRAD(loss, W) AS G WHERE G.i = ?", [0]).fetchall()
    assert len(bound) == 4  # a statement with other parameters is another statement


def _stored(value) -> lp.Filter:
    """A plan over stored data only (a filter of a table's key against `value`)."""
    from trdb.plan import expressions as bx
    from trdb.plan.types import ScalarType

    scan = lp.TableScan("t", ("i",), SCHEMA[:1])
    return lp.Filter(scan, bx.Compare("=", bx.ColumnIndex(0, KeyType()), bx.Const(value, ScalarType(int))))


def test_plans_over_stored_data_are_known_by_value_and_never_by_a_forgotten_token(monkeypatch):
    import trdb.pipeline.plan_memo as plan_memo

    memo = PlanMemo()
    node = query.plan_physical(_stored(1), 2)
    memo.put(memo.lookup(_stored(1), False)[1], node)
    assert memo.lookup(_stored(1), False)[0] is node  # another object, equal: the same key
    assert memo.lookup(_stored(2), False)[0] is None
    monkeypatch.setattr(plan_memo, "KEPT_SIGNATURES", 1)  # every new signature now forgets the others
    keys = [memo.lookup(_stored(value), False)[1].key for value in range(3, 9)]
    assert len(set(keys)) == len(keys)  # other plans, other keys: no token is given twice
    assert memo.lookup(_stored(1), False)[0] is None  # known again by a new token: planned again, not mistaken


def test_swapping_tuples_copies_nodes_whose_init_computes_nothing():
    """with_rows copies physical nodes and RowsScan specs without their __init__ (plan_memo._copied): right only
    while none of them computes anything there or keeps its fields in slots."""
    from trdb.plan import physical_operators as po
    from trdb.plan.physical import PhysicalNode
    classes = [PhysicalNode, po.RowsScan]
    for cls in classes:
        assert not hasattr(cls, "__post_init__") and "__slots__" not in vars(cls), cls
