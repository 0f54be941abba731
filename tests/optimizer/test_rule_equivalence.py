"""Every optimizer rule keeps results: logic files and targeted queries give the same rows with each rule disabled."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import trdb
from helpers.logic_runner import logic_files, run_file
from trdb.config.settings import PHYSICAL_RULES
from trdb.optimizer.driver import RULE_NAMES

SQL_ROOT = Path(__file__).parent.parent / "sql"
DISABLED = list(RULE_NAMES) + [",".join(RULE_NAMES), ",".join(PHYSICAL_RULES)]  # the last: no exchange rule

SETUP = [
    "CREATE TENSOR A SHAPE (48, 32) TILE (16, 16) FILL RANDOM_NORMAL(0, 1, 1)",
    "CREATE TENSOR B SHAPE (32, 28) TILE (16, 8) FILL RANDOM_NORMAL(0, 1, 2)",
    "CREATE TENSOR M (i) SHAPE (48) TILE (16) FILL RANDOM_UNIFORM(1, 2, 3)",
    "CREATE TENSOR S (j) SHAPE (32) TILE (16) FILL RANDOM_UNIFORM(1, 2, 4)",
    "CREATE TENSOR C SHAPE (48, 32) TILE (16, 16) FILL RANDOM_NORMAL(0, 1, 5)",
    "DELETE FROM C WHERE C.i = 1",
    "DELETE FROM M WHERE M.i = 0",
    "CREATE TENSOR D (k, i, j) SHAPE (3, 48, 32) TILE (1, 16, 16) FILL RANDOM_NORMAL(0, 1, 6)",
    # float64: a chain of products re-associated rounds differently (float32 by about 1e-5 of these sums)
    "CREATE TENSOR N SHAPE (40, 48) TILE (16, 16) DTYPE float64 FILL RANDOM_NORMAL(0, 1, 7)",
    "DELETE FROM N WHERE N.i = 1 AND N.j = 2",
    "CREATE TENSOR F SHAPE (48, 32) TILE (16, 16) DTYPE float64 FILL RANDOM_NORMAL(0, 1, 8)",
    "CREATE TENSOR E SHAPE (32, 40) TILE (16, 16) DTYPE float64 FILL RANDOM_NORMAL(0, 1, 9)",
]

QUERIES = [
    # predicate pushdown: inner, outer and cross joins, rekeys, aggregates, unions, limits
    "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i "
    "WHERE A.i < 2 AND B.j >= 1 GROUP BY A.i, B.j",
    "SELECT A.i, A.j, B.i AS bi, A.v FROM A JOIN B ON A.j = B.i WHERE A.i = B.j",
    "SELECT A.i, A.j, C.v + A.v AS v FROM A LEFT JOIN C ON A.i = C.i AND A.j = C.j WHERE C.i IS NULL",
    "SELECT A.i, A.j, C.i AS ci, A.v + C.v AS v FROM A LEFT JOIN C ON A.i = C.i AND A.j = C.j "
    "WHERE A.i < 2 AND C.j = 0",
    "SELECT COALESCE(A.i, C.i) AS i, COALESCE(A.j, C.j) AS j, A.v - C.v AS v "
    "FROM A FULL JOIN C ON A.i = C.i AND A.j = C.j WHERE A.i = 1 OR C.j = 2",
    "SELECT S.i, S.j, S.w FROM (SELECT A.j AS i, A.i AS j, RELU(A.v) AS w FROM A) AS S WHERE S.i = 1 AND S.j <> 0",
    "SELECT G.i, G.v FROM (SELECT A.i, SUM(A.v) AS v FROM A GROUP BY A.i) AS G WHERE G.i >= 1",
    "SELECT U.i, U.j FROM (SELECT A.i, A.j FROM A UNION ALL SELECT C.i, C.j FROM C) AS U WHERE U.i = 2",
    "SELECT L.i, L.j FROM (SELECT A.i, A.j FROM A ORDER BY i, j LIMIT 5) AS L WHERE L.j = 1",
    "SELECT A.i, A.j, A.v FROM A WHERE SUMSQ(A.v) > 200 AND A.i < 2",
    "SELECT A.i, A.j, C.j AS cj FROM A, C WHERE A.i = C.i AND A.j < C.j AND C.i = 1",
    # projection pruning and kernel fusion
    "SELECT S.i, SUM(S.r) AS v FROM (SELECT A.i, A.j, RELU(A.v) AS r, EXP(A.v) AS e FROM A) AS S GROUP BY S.i",
    "SELECT COUNT(*) AS n FROM (SELECT A.i, SIGMOID(A.v) AS s FROM A) AS S",
    "SELECT S.j AS i, S.i AS j, SIGMOID(S.w) * S.w AS v FROM (SELECT A.i, A.j, A.v * 2 + 1 AS w FROM A) AS S",
    "SELECT T.i, T.j, T.a + T.b AS v FROM (SELECT A.i, A.j, TANH(A.v) AS a, A.v * A.v AS b FROM A) AS T",
    "SELECT Q.k, SUM(Q.x) AS v FROM (SELECT A.i // 2 AS k, A.j, A.v * 3 AS x FROM A) AS Q GROUP BY Q.k",
    "SELECT X.i, X.j, X.m FROM (SELECT A.i, A.j, SUM(A.v) AS s, MAX(A.v) AS m FROM A GROUP BY A.i, A.j) AS X",
    # constant folding and identity projections
    "SELECT A.i, A.j, A.v FROM A WHERE 1 = 1 OR A.i = 2",
    "SELECT A.i + (2 - 1) AS i, A.j, A.v FROM A WHERE A.i < 1 + 1 AND 2 > 1",
    "SELECT * FROM (SELECT * FROM (SELECT * FROM A) AS P) AS Q WHERE Q.j = 0",
    # aggregate pushdown
    "SELECT A.i, SUM(A.v) AS v FROM A JOIN M ON A.i = M.i GROUP BY A.i",
    "SELECT S.j, SUM(A.v * S.v) AS v FROM A JOIN S ON A.j = S.j GROUP BY S.j",
    "SELECT A.j, SUM(S.v * A.v) AS v, SUM(A.v) AS w FROM S JOIN A ON S.j = A.j GROUP BY A.j",
    "SELECT M.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN M ON A.i = M.i JOIN B ON A.j = B.i GROUP BY M.i, B.j",
    "SELECT SUM(TRANSPOSE(A.v) * M.v) AS v FROM A JOIN M ON A.i = M.i",
    "SELECT D.i, SUM(D.v) AS v FROM D JOIN M ON D.i = M.i GROUP BY D.i",
    "SELECT D.i, D.j, SUM(D.v) AS v FROM D JOIN S ON D.j = S.j GROUP BY D.i, D.j",
    "SELECT M.i, SUM(A.v) AS v, COUNT(*) AS n FROM A JOIN M ON A.i = M.i GROUP BY M.i",
    # a chain of products, N·(F·E) with F narrower than E: re-associated as (N·F)·E (product_chains)
    "SELECT N.i, q.j, SUM(MATMUL(N.v, q.v)) AS v FROM N JOIN (SELECT F.i, E.j, SUM(MATMUL(F.v, E.v)) AS v "
    "FROM F JOIN E ON F.j = E.i GROUP BY F.i, E.j) AS q ON N.j = q.i GROUP BY N.i, q.j",
]


@pytest.mark.parametrize("disabled", DISABLED, ids=lambda d: ("all physical" if "broadcast" in d else "all") if "," in d else d)
@pytest.mark.parametrize("path", logic_files(SQL_ROOT), ids=lambda p: str(p.relative_to(SQL_ROOT)))
def test_logic_file_with_rule_disabled(path: Path, disabled: str) -> None:
    run_file(path, setup=("SET workers = 2", f"SET disabled_rules = '{disabled}'"))


@pytest.fixture(scope="module")
def database():
    con = trdb.connect()
    cur = con.cursor()
    for statement in SETUP:
        cur.execute(statement)
    yield cur
    con.close()


def _rows(cur, query: str, disabled: str, workers: int) -> list:
    cur.execute(f"SET workers = {workers}")
    cur.execute(f"SET disabled_rules = '{disabled}'")
    cur.execute(query)
    return sorted(cur.fetchall(), key=lambda row: tuple(-1 if v is None else v for v in row
                                                        if not isinstance(v, np.ndarray)))


def _assert_same(expected: list, actual: list, where: str) -> None:
    assert len(expected) == len(actual), f"{where}: {len(expected)} rows, got {len(actual)}"
    for want, got in zip(expected, actual):
        for a, b in zip(want, got):
            if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
                assert np.asarray(a).shape == np.asarray(b).shape, where
                np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-5, err_msg=where)
            else:
                assert a == b, f"{where}: {want} != {got}"


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("query", QUERIES)
def test_query_same_with_each_rule_disabled(database, query: str, workers: int) -> None:
    expected = _rows(database, query, "", workers)
    for disabled in DISABLED + ["product_chains"]:
        _assert_same(expected, _rows(database, query, disabled, workers), f"{query} [disabled: {disabled}]")
