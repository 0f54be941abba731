"""The binder only binds: EINSUM and GRAD become `Einsum` and `Gradient` nodes that the pipeline expands."""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from trdb.parser import parse
from trdb.pipeline.expansions import expand
from trdb.plan import logical as lp
from trdb.planner.binder import Binder
from trdb.planner.expression_binder import BindContext

SETUP = ("CREATE TENSOR A SHAPE (64, 32) TILE (16, 32) FILL RANDOM_NORMAL(0, 1, 1)",
         "CREATE TENSOR B SHAPE (32, 8) TILE (32, 4) FILL RANDOM_NORMAL(0, 1, 2)",
         "CREATE VIEW loss AS SELECT SUM(SUMSQ(e.v)) AS v FROM EINSUM('ij,jk->ik', A, B) e",
         "CREATE VIEW constant AS SELECT SUM(SUMSQ(A.v)) AS v FROM A")


@pytest.fixture
def session():
    con = trdb.connect()
    cur = con.cursor()
    for statement in SETUP:
        cur.execute(statement)
    yield con._live
    con.close()


def bind(session, text: str) -> lp.Plan:
    return Binder(session.catalog, BindContext(text, [])).bind_query(parse(text).query).plan


def kinds(plan: lp.Plan) -> set[str]:
    return {type(plan).__name__}.union(*(kinds(child) for child in plan.inputs))


def test_einsum_binds_to_one_node_tiled_like_its_largest_operand(session):
    plan = bind(session, "SELECT * FROM EINSUM('ij,jk->ik', A, B) e")
    assert "Einsum" in kinds(plan) and not {"Join", "Aggregate"} & kinds(plan)
    value = plan.schema[-1].type
    assert [c.name for c in plan.schema] == ["i", "k", "v"]
    assert value.tile == (16, 4) and value.extent == (64, 8)  # i as A has it, k as B: A is the larger operand
    expanded = expand(plan, workers=2)
    assert not {"Einsum", "Gradient"} & kinds(expanded) and "Join" in kinds(expanded)
    assert expanded.schema == plan.schema


def test_grad_binds_to_one_node_keyed_like_its_parameter(session):
    plan = bind(session, "SELECT * FROM GRAD(loss, B)")
    assert "Gradient" in kinds(plan) and "Einsum" in kinds(plan) and "Join" not in kinds(plan)
    assert [c.name for c in plan.schema] == ["i", "j", "v"] and plan.schema[-1].type.tile == (32, 4)
    expanded = expand(plan, workers=1)
    assert not {"Einsum", "Gradient"} & kinds(expanded)
    assert expanded.schema == plan.schema


def test_a_subplan_used_twice_is_expanded_once(session):
    einsum = bind(session, "SELECT * FROM EINSUM('ij,jk->ik', A, B) e")
    union = lp.UnionAll((einsum, einsum), einsum.schema)
    expanded = expand(union, workers=1)
    assert expanded.parts[0] is expanded.parts[1]


def test_an_error_found_while_expanding_points_at_the_grad(cur):
    for statement in SETUP:
        cur.execute(statement)
    with pytest.raises(trdb.ProgrammingError) as info:
        cur.execute("SELECT *\nFROM GRAD(constant, B)")
    assert 'does not depend on "B"' in str(info.value) and "LINE 2" in str(info.value)


def test_expanded_plans_give_numpy_results(cur):
    for statement in SETUP:
        cur.execute(statement)
    a = cur.execute("SELECT * FROM A").fetch_tensor()
    b = cur.execute("SELECT * FROM B").fetch_tensor()
    product = cur.execute("SELECT * FROM EINSUM('ij,jk->ik', A, B) e").fetch_tensor()
    np.testing.assert_allclose(product, a @ b, rtol=1e-5, atol=1e-5)
    gradient = cur.execute("SELECT * FROM GRAD(loss, B)").fetch_tensor()
    np.testing.assert_allclose(gradient, 2 * a.T @ (a @ b), rtol=1e-4, atol=1e-4)
