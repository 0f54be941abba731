"""The optimizer driver and its rules on logical plans: order, timings, schema checks, disabled_rules, rule limits."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import trdb
from trdb.config.settings import Settings
from trdb.optimizer import driver
from trdb.optimizer.driver import RULE_NAMES, RuleContext, optimize
from trdb.parser import parse
from trdb.plan import logical as lp
from trdb.plan.types import KEY, Column
from trdb.planner.binder import Binder
from trdb.planner.expression_binder import BindContext


@pytest.fixture
def session():
    con = trdb.connect()
    cur = con.cursor()
    for statement in ("CREATE TENSOR A SHAPE (64, 64) TILE (16, 16) FILL ONES",
                      "CREATE TENSOR C SHAPE (64, 64) TILE (16, 16) FILL ONES",
                      "CREATE TENSOR M (i) SHAPE (64) TILE (16) FILL ONES"):
        cur.execute(statement)
    yield con._live
    con.close()


def bind(session, text: str) -> lp.Plan:
    return Binder(session.catalog, BindContext(text, [])).bind_query(parse(text).query).plan


def nodes(plan: lp.Plan) -> list:
    return [plan] + [n for child in plan.inputs for n in nodes(child)]


def settings(disabled: str = "") -> Settings:
    values = Settings()
    values.set("disabled_rules", disabled)
    return values


def test_rule_modules_functions_and_names_agree() -> None:
    for rule in driver.RULES:
        assert rule.__module__ == f"trdb.optimizer.rules.{rule.__name__}"
    assert len(set(RULE_NAMES)) == len(RULE_NAMES) == 11


def test_unknown_rule_names_are_rejected_with_the_valid_ones(cur) -> None:
    with pytest.raises(trdb.ProgrammingError) as caught:
        cur.execute("SET disabled_rules = 'nonsense'")
    for name in RULE_NAMES:
        assert name in str(caught.value)
    with pytest.raises(trdb.ProgrammingError):
        cur.execute("SET disabled_rules = 'kernel_fusion, nonsense'")


def test_every_rule_name_is_accepted_and_normalized(cur) -> None:
    for name in RULE_NAMES:
        cur.execute(f"SET disabled_rules = '{name.upper()}'")
    cur.execute("SET disabled_rules = ' Kernel_Fusion , constant_folding '")
    cur.execute("SHOW disabled_rules")
    assert cur.fetchall() == [("kernel_fusion,constant_folding",)]
    cur.execute("SET disabled_rules = ''")


def test_each_rule_is_timed_and_disabled_rules_are_skipped(session) -> None:
    plan = bind(session, "SELECT * FROM (SELECT * FROM A) AS S WHERE S.i = 1")
    context = RuleContext(session.catalog, settings("kernel_fusion"))
    optimize(plan, context.settings, session.catalog, context)
    ran = {t.rule for t in context.timings}
    assert ran == set(RULE_NAMES) - {"kernel_fusion"}
    assert all(t.seconds >= 0 for t in context.timings)
    assert any(t.changed for t in context.timings)


def test_a_rule_that_changes_the_output_columns_is_an_internal_error(session, monkeypatch) -> None:
    def broken_rule(plan, context):
        return lp.Project(plan, (), ())
    monkeypatch.setattr(driver, "RULES", (broken_rule,))
    with pytest.raises(trdb.InternalError, match="broken_rule"):
        optimize(bind(session, "SELECT A.i FROM A"), settings(), session.catalog)


def test_a_rule_that_changes_a_tile_shape_is_an_internal_error(session, monkeypatch) -> None:
    def retype(plan, context):
        column = plan.schema[-1]
        wrong = dataclasses.replace(column.type, tile=(8, 8))
        exprs = tuple(dataclasses.replace(e, type=wrong) if i == 2 else e for i, e in enumerate(plan.exprs))
        return lp.Project(plan.input, exprs, plan.schema[:-1] + (Column(column.name, wrong),))
    monkeypatch.setattr(driver, "RULES", (retype,))
    with pytest.raises(trdb.InternalError, match="retype"):
        optimize(bind(session, "SELECT A.i, A.j, A.v * 2 AS v FROM A"), settings(), session.catalog)


QUERIES = [
    "SELECT A.i, C.j, SUM(MATMUL(A.v, C.v)) AS v FROM A JOIN C ON A.j = C.i WHERE A.i < 2 GROUP BY A.i, C.j",
    "SELECT S.j AS i, S.i AS j, SIGMOID(S.w) AS v FROM (SELECT A.i, A.j, A.v * 2 + 1 AS w FROM A) AS S WHERE S.i = 1",
    "SELECT A.i, SUM(A.v) AS v FROM A JOIN M ON A.i = M.i GROUP BY A.i",
    "SELECT A.i, A.j, A.v FROM A WHERE 1 = 1 OR A.i = 2",
]


@pytest.mark.parametrize("query", QUERIES)
def test_optimizing_twice_changes_nothing(session, query: str) -> None:
    once = optimize(bind(session, query), settings(), session.catalog)
    assert optimize(once, settings(), session.catalog) is once


def test_a_kernel_used_twice_is_not_fused(session) -> None:
    plan = optimize(bind(session, "SELECT T.i, T.j, T.a * T.a AS v FROM (SELECT A.i, A.j, TANH(A.v) AS a FROM A) AS T"),
                    settings(), session.catalog)
    assert sum(isinstance(n, lp.Project) for n in nodes(plan)) == 2


def test_conditions_stay_above_limit_and_the_missing_side_of_outer_joins(session) -> None:
    plan = optimize(bind(session, "SELECT L.i FROM (SELECT A.i FROM A LIMIT 3) AS L WHERE L.i = 1"),
                    settings(), session.catalog)
    assert isinstance(plan, lp.Filter) or isinstance(plan.input, lp.Filter)
    for kind in ("LEFT", "FULL"):
        plan = optimize(bind(session, f"SELECT A.i, C.j AS cj FROM A {kind} JOIN C ON A.i = C.i AND A.j = C.j "
                                      "WHERE C.j = 1"), settings(), session.catalog)
        join = next(n for n in nodes(plan) if isinstance(n, lp.Join))
        assert not any(isinstance(n, lp.Filter) for n in nodes(join))


def test_tensor_conditions_are_not_moved(session) -> None:
    plan = optimize(bind(session, "SELECT A.i, C.j FROM A JOIN C ON A.j = C.i WHERE SUMSQ(A.v) > 1"),
                    settings(), session.catalog)
    join = next(n for n in nodes(plan) if isinstance(n, lp.Join))
    assert not any(isinstance(n, lp.Filter) for n in nodes(join))


def test_outer_joins_keep_every_column_of_their_inputs(session) -> None:
    query = ("SELECT COALESCE(S.i, C.i) AS i, COALESCE(S.j, C.j) AS j, S.r + C.v AS v FROM "
             "(SELECT A.i, A.j, RELU(A.v) AS r, EXP(A.v) AS e FROM A) AS S FULL JOIN C ON S.i = C.i AND S.j = C.j")
    plan = optimize(bind(session, query), settings(), session.catalog)
    join = next(n for n in nodes(plan) if isinstance(n, lp.Join))
    assert len(join.left.schema) == 4


def test_aggregate_pushdown_needs_a_unique_side(session) -> None:
    plan = optimize(bind(session, "SELECT A.i, SUM(A.v) AS v FROM A JOIN C ON A.i = C.i GROUP BY A.i"),
                    settings(), session.catalog)
    assert isinstance(plan, lp.Aggregate) and isinstance(plan.input, lp.Join)
    plan = optimize(bind(session, "SELECT A.i, SUM(A.v) AS v FROM A JOIN M ON A.i = M.i GROUP BY A.i"),
                    settings(), session.catalog)
    join = next(n for n in nodes(plan) if isinstance(n, lp.Join))
    assert isinstance(join.left, lp.Aggregate)
    assert plan.schema[0].type == KEY


def test_join_ordering_beyond_the_exact_limit_is_greedy_and_correct(cur) -> None:
    # 12 inputs: more than MAX_EXACT, ordered greedily; the result must not change
    rng = np.random.default_rng(5)
    for n in range(12):
        cur.execute(f"CREATE TENSOR M{n} FROM ? TILE (4, 4)", [rng.standard_normal((8, 8))])
    froms = ", ".join(f"M{n}" for n in range(12))
    where = " AND ".join(f"M{n}.j = M{n + 1}.i" for n in range(11))
    query = f"SELECT M0.i, M11.j, SUM(MATMUL(M0.v, M5.v)) AS v FROM {froms} WHERE {where} GROUP BY M0.i, M11.j"
    ordered = cur.execute(query).fetch_tensor()
    cur.execute("SET disabled_rules = 'join_ordering'")
    np.testing.assert_allclose(cur.execute(query).fetch_tensor(), ordered, rtol=1e-12)
