"""Tile products shared by the instances of a partitioned SUM(MATMUL) aggregate: an idle instance computes its
siblings' queued products, each sum adds its products in the order of its rows (bit for bit the unshared
sums), a failed product raises in the instance that owns it, and a wait ends on cancellation."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import trdb
from trdb.errors import QueryCancelled
from trdb.execution.operators import hash_aggregate
from trdb.execution.state import ExecutionState
from trdb.execution.tile_math.product_sharing import QUEUED, GroupOrder, ProductShare, SharedProducts


def _helping(member) -> threading.Thread:
    thread = threading.Thread(target=member.input_ended, daemon=True)
    thread.start()
    return thread


def _wait_for(condition, seconds: float = 30) -> None:
    ended = threading.Event()
    for _ in range(int(seconds * 100)):
        if condition():
            return
        ended.wait(0.01)
    raise AssertionError("timed out")


def test_an_idle_sibling_computes_the_queued_products_which_the_owner_adds_in_order():
    share = ProductShare(ExecutionState())
    owner, idle = share.member(), share.member()
    order, added, computed_on = GroupOrder(), [], {}
    for n in range(QUEUED):  # all stay queued: the owner computes none of them itself
        owner.submit(order, lambda n=n: computed_on.setdefault(n, threading.get_ident()) and n, added.append)
    assert computed_on == {} and order.pending == QUEUED
    helper = _helping(idle)
    _wait_for(lambda: len(computed_on) == QUEUED)
    assert set(computed_on.values()) == {helper.ident}
    owner.input_ended()
    helper.join(timeout=30)
    assert not helper.is_alive() and added == list(range(QUEUED)) and order.pending == 0


def test_products_computed_out_of_order_are_added_in_the_order_of_their_rows():
    share = ProductShare(ExecutionState())
    owner, helpers = share.member(), [share.member() for _ in range(3)]
    orders, added = [GroupOrder(), GroupOrder()], {0: [], 1: []}
    rng = np.random.default_rng(0)
    pauses = rng.uniform(0, 0.01, size=40)

    def product(n: int) -> int:
        threading.Event().wait(pauses[n])  # the helpers finish in another order than they began
        return n
    threads = [_helping(h) for h in helpers]
    for n in range(40):
        owner.submit(orders[n % 2], lambda n=n: product(n), added[n % 2].append)
    owner.input_ended()
    for thread in threads:
        thread.join(timeout=30)
    assert added == {0: list(range(0, 40, 2)), 1: list(range(1, 40, 2))}


def test_a_failed_product_raises_in_its_owner_when_its_turn_comes():
    share = ProductShare(ExecutionState())
    owner, idle = share.member(), share.member()
    order, added = GroupOrder(), []

    def fails():
        raise ValueError("shapes do not fit")
    owner.submit(order, lambda: 1, added.append)
    owner.submit(order, fails, added.append)
    owner.submit(order, lambda: 3, added.append)
    helper = _helping(idle)  # computes the failing one, and goes on
    with pytest.raises(ValueError, match="shapes do not fit"):
        owner.settle_all()
    assert added == [1]
    owner.close()
    helper.join(timeout=30)
    assert not helper.is_alive()


def test_a_wait_for_a_sibling_ends_when_the_execution_is_cancelled():
    state = ExecutionState()
    share = ProductShare(state)
    owner, _silent = share.member(), share.member()  # the sibling never ends its input
    order = GroupOrder()
    owner.submit(order, lambda: 1, lambda _: None)
    failed = []
    waiting = threading.Thread(target=lambda: _record(owner.input_ended, failed), daemon=True)
    waiting.start()
    _wait_for(lambda: order.pending == 0)
    state.fail(QueryCancelled("the statement was cancelled"))
    waiting.join(timeout=30)
    assert not waiting.is_alive() and isinstance(failed[0], QueryCancelled)


def _record(run, failures: list) -> None:
    try:
        run()
    except BaseException as exc:
        failures.append(exc)


@pytest.fixture
def tensors():
    rng = np.random.default_rng(7)
    return rng.standard_normal((1024, 512), dtype=np.float32), rng.standard_normal((512, 384), dtype=np.float32)


PRODUCT = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"
QUERIES = {"placed": PRODUCT,  # the cursor's result: each group's first product goes into the result's array
           "read by a plan": f"SELECT P.i, P.j, P.v * 2 AS v FROM ({PRODUCT}) AS P"}


def _run(query: str, a: np.ndarray, b: np.ndarray, shared: bool, monkeypatch) -> tuple[np.ndarray, int]:
    """The query's tiles in key order, one array, and how many products were queued to be shared."""
    queued = []
    if shared:
        submit = SharedProducts.submit
        monkeypatch.setattr(SharedProducts, "submit", lambda self, *args: (queued.append(1), submit(self, *args)))
    else:
        monkeypatch.setattr(hash_aggregate.HashAggregateExec, "share_products", lambda self, share: None)
    con = trdb.connect(workers=2)
    try:
        cur = con.cursor()
        cur.execute("SET disabled_rules = 'dense_products'")  # tile products, in a partitioned aggregate
        cur.execute("SET min_parallel_cost = 0")
        cur.execute("CREATE TENSOR A FROM ? TILE (128, 128)", [a])
        cur.execute("CREATE TENSOR B FROM ? TILE (128, 128)", [b])
        rows = sorted(cur.execute(query).fetchall(), key=lambda row: row[:-1])
        return np.concatenate([row[-1].ravel() for row in rows]), len(queued)
    finally:
        monkeypatch.undo()
        con.close()


@pytest.mark.parametrize("query", QUERIES.values(), ids=QUERIES.keys())
def test_shared_sums_are_the_unshared_sums_bit_for_bit(query, tensors, monkeypatch):
    a, b = tensors
    shared, queued = _run(query, a, b, True, monkeypatch)
    unshared, _ = _run(query, a, b, False, monkeypatch)
    assert queued == 8 * 4 * 3  # every product: 128^3 tiles, 2^22 FLOPs each, at MIN_SHARED_FLOPS
    assert shared.tobytes() == unshared.tobytes()
    scale = 2 if "P.v * 2" in query else 1
    full = np.concatenate([(scale * a.astype(np.float64) @ b)[i:i + 128, j:j + 128].ravel()
                           for i in range(0, 1024, 128) for j in range(0, 384, 128)])
    np.testing.assert_allclose(shared, full, rtol=1e-4, atol=1e-3)
