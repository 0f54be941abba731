"""The plan cache: repeated queries reuse their plan, and no change to data, catalog or settings is missed."""
from __future__ import annotations

import numpy as np
import pytest

from trdb.errors import ProgrammingError
from trdb.pipeline.plan_cache import PlanCache

QUERY = "SELECT i, SUM(v) AS v FROM x GROUP BY i"


@pytest.fixture
def x(cur):
    cur.execute("CREATE TENSOR x FROM ? TILE (2)", [np.arange(6, dtype=np.float64)])
    return cur


def _plans(cur):
    return len(cur.connection._session().plans._plans)


def test_a_repeated_query_plans_once(x):
    first = x.execute("SELECT * FROM x WHERE i > ?", [0]).fetch_tensor()
    cached = _plans(x)
    again = x.execute("SELECT * FROM x WHERE i > ?", [0]).fetch_tensor()
    assert _plans(x) == cached
    np.testing.assert_array_equal(first, again)


def test_different_parameters_give_their_own_results(x):
    assert len(x.execute("SELECT * FROM x WHERE i > ?", [0]).fetchall()) == 2
    assert len(x.execute("SELECT * FROM x WHERE i > ?", [1]).fetchall()) == 1
    assert len(x.execute("SELECT * FROM x WHERE i > ?", [0]).fetchall()) == 2


def test_writes_are_seen(x):
    before = x.execute("SELECT * FROM x").fetch_tensor()
    x.execute("UPDATE x SET v = v * 2")
    np.testing.assert_array_equal(x.execute("SELECT * FROM x").fetch_tensor(), before * 2)
    x.execute("DELETE FROM x WHERE i = 2")
    assert len(x.execute("SELECT * FROM x").fetchall()) == 2


def test_a_recreated_tensor_with_another_shape_is_seen(x):
    x.execute("SELECT * FROM x").fetchall()
    x.execute("DROP TENSOR x")
    x.execute("CREATE TENSOR x FROM ? TILE (3)", [np.ones(9)])
    np.testing.assert_array_equal(x.execute("SELECT * FROM x").fetch_tensor(), np.ones(9))


def test_a_dropped_tensor_is_an_error_not_a_stale_plan(x):
    x.execute("SELECT * FROM x").fetchall()
    x.execute("DROP TENSOR x")
    with pytest.raises(ProgrammingError, match='"x"'):
        x.execute("SELECT * FROM x")


def test_rollback_is_seen(x):
    x.execute("BEGIN")
    x.execute("UPDATE x SET v = v + 1")
    x.execute(QUERY).fetchall()
    x.execute("ROLLBACK")
    np.testing.assert_array_equal(x.execute("SELECT * FROM x").fetch_tensor(), np.arange(6.0))


def test_settings_are_part_of_the_key(x):
    x.execute("SET workers = 1")
    serial = x.execute(QUERY).fetch_tensor()
    x.execute("SET workers = 2")
    np.testing.assert_array_equal(x.execute(QUERY).fetch_tensor(), serial)
    assert _plans(x) == 2


def test_ordinary_tables_changed_by_plain_sql_are_seen(cur):
    cur.execute("CREATE TABLE t (i INTEGER, v DOUBLE)")
    cur.execute("INSERT INTO t VALUES (0, 1.0)")
    cur.execute("CREATE TENSOR y FROM ? TILE (2)", [np.ones(2)])
    query = "SELECT y.i, y.v * t.v AS v FROM y JOIN t ON y.i = t.i"
    assert len(cur.execute(query).fetchall()) == 1
    cur.execute("INSERT INTO t VALUES (0, 2.0)")
    assert len(cur.execute(query).fetchall()) == 2


def test_array_parameters_make_no_key():
    assert PlanCache.key("SELECT ?", [np.ones(2)], (), 0) is None
    assert PlanCache.key("SELECT ?", [1], (), 0) != PlanCache.key("SELECT ?", [1.0], (), 0)
