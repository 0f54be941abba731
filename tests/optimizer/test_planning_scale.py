"""Planning stays polynomial with many joins (counted in search states, not seconds) and stops when cancelled."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import trdb
from trdb.errors import QueryCancelled
from trdb.optimizer import driver
from trdb.optimizer.driver import RuleContext, optimize
from trdb.optimizer.rules import join_ordering as ordering
from trdb.parser import parse
from trdb.planner.binder import Binder
from trdb.planner.expression_binder import BindContext


def star_join(joins: int) -> str:
    return "SELECT A0.i, A0.j, A0.v FROM A AS A0 " + " ".join(
        f"JOIN A AS A{k} ON A0.i = A{k}.i" for k in range(1, joins + 1))


def chain_join(joins: int) -> str:
    return "SELECT A0.i, A0.j, A0.v FROM A AS A0 " + " ".join(
        f"JOIN A AS A{k} ON A{k - 1}.j = A{k}.i" for k in range(1, joins + 1))


@pytest.fixture
def session():
    con = trdb.connect()
    con.cursor().execute("CREATE TENSOR A FROM ? TILE (4, 4)", [np.ones((8, 8), np.float32)])
    yield con._live
    con.close()


def planned(session, text: str, context: RuleContext):
    plan = Binder(session.catalog, BindContext(text, [])).bind_query(parse(text).query).plan
    return optimize(plan, session.settings, session.catalog, context)


@pytest.mark.parametrize("shape", [star_join, chain_join])
def test_join_ordering_states_are_polynomial_for_150_joins(session, shape) -> None:
    context = RuleContext(session.catalog, session.settings)
    planned(session, shape(150), context)
    inputs = 151
    # greedy operator ordering: each input's pairs at the start, then one input's pairs per step,
    # both ways round; the old greedy search visited about inputs**3 / 3 (1.1 million) joins
    assert 0 < context.states["join_ordering"] <= 4 * inputs ** 2


def test_the_exact_program_is_bounded_by_its_size(session) -> None:
    context = RuleContext(session.catalog, session.settings)
    planned(session, star_join(ordering.MAX_EXACT - 1), context)
    # every pass of the driver may run the program again: at most 3**inputs splits each
    assert 0 < context.states["join_ordering"] <= driver.MAX_PASSES * 3 ** ordering.MAX_EXACT


def test_planning_300_joins_finishes(session) -> None:
    result = session.execute("EXPLAIN " + star_join(300))
    assert any("HashJoinExec" in row[0] for row in result.rows)


def test_a_cancelled_statement_stops_inside_the_join_search(session, monkeypatch) -> None:
    interrupted = threading.Event()
    light_join = ordering._light_join
    calls = []

    def counting(*args):
        calls.append(1)
        if len(calls) == 100:
            interrupted.set()
        return light_join(*args)
    monkeypatch.setattr(ordering, "_light_join", counting)
    context = RuleContext(session.catalog, session.settings, interrupted=interrupted)
    with pytest.raises(QueryCancelled):
        planned(session, star_join(150), context)
    assert len(calls) < 1000  # it stopped at the next step, long before the search's end


def test_cursor_close_during_planning_acts_at_once(monkeypatch) -> None:
    con = trdb.connect()
    cur = con.cursor()
    cur.execute("CREATE TENSOR A FROM ? TILE (4, 4)", [np.ones((8, 8), np.float32)])
    started = threading.Event()
    greedy = ordering._Orderer._greedy

    def signalling(self, *args):
        started.set()
        return greedy(self, *args)
    monkeypatch.setattr(ordering._Orderer, "_greedy", signalling)
    outcome = []

    def run():
        try:
            cur.execute("EXPLAIN " + star_join(300))
            outcome.append("finished")
        except QueryCancelled:
            outcome.append("cancelled")
    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(60)
    closed_at = time.perf_counter()
    cur.close()
    thread.join(60)
    assert outcome == ["cancelled"] and time.perf_counter() - closed_at < 5
    con.close()


def test_many_operand_einsum_costs_polynomially_many_steps(monkeypatch) -> None:
    from trdb.optimizer import einsum_order
    calls = []
    step_cost = einsum_order.step_cost
    monkeypatch.setattr(einsum_order, "step_cost", lambda *a, **k: calls.append(1) or step_cost(*a, **k))
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    operands = 40
    terms = [letters[k] + letters[k + 1] for k in range(operands)]
    size = {c: 64 for c in letters[:operands + 1]}
    tile = {c: 8 for c in letters[:operands + 1]}
    path = einsum_order.greedy_path(terms, letters[0] + letters[operands], size, tile, [1.0] * operands)
    assert len(path) == operands - 1
    # a chain: only the pairs that share a letter are costed, about operands**2 / 2 steps in all
    # (every pair at every step, as before, was about operands**3 / 6 = 10,000)
    assert len(calls) <= operands ** 2
