"""GRAD of random composed queries (joins, outer joins, filters, rekeys, kernels, aggregates, CTEs, absent
tiles) against float64 central differences of the same loss, along a random direction.

Each seed takes the query of tests/helpers/random_queries.py and wraps it as a scalar loss
`SUM(SUMSQ(f.v)) FROM (query) AS f` (through a view for odd seeds, of a UNION ALL for every
third); for every stored tensor T the loss depends on, it checks <GRAD(loss, T), D> against
(loss(T + eps D) - loss(T - eps D)) / 2 eps, with D random where T is not zero (perturbing an absent
tile would make it present, which changes the query, not the value).
Run a longer sweep by hand with `TRDB_GRADIENT_SEEDS=2000 pytest tests/autodiff/test_random_gradients.py`.
"""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

import trdb
from helpers.random_queries import build_case

SEEDS = range(int(os.environ.get("TRDB_GRADIENT_SEEDS", "40")))
EPS = 1e-6
_TENSOR = re.compile(r"CREATE TENSOR (\w+)")


def _setup(case, replaced=None):
    """A connection holding the case's tensors in float64 (one replaced by another array)."""
    con = trdb.connect()
    for sql, array, _ in case.setup:
        if array is None:
            con.execute(sql)
            continue
        name = _TENSOR.match(sql).group(1)
        data = replaced[1] if replaced and replaced[0] == name else array.astype(np.float64)
        con.execute(sql + " DTYPE float64", [data])
    return con


def _loss_sql(con, case) -> str:
    """The loss over the query: read through a view (odd seeds), and as a UNION ALL with itself (every third)."""
    names = [d[0] for d in con.execute(case.sql).description]
    value = names[-1] if case.expected.rank else names[0]
    query = case.sql
    if case.seed % 3 == 0 and " ORDER BY " not in query:
        query = f"SELECT * FROM ({query}) AS a UNION ALL SELECT * FROM ({query}) AS b"
    source = f"({query}) AS f"
    if case.seed % 2:
        con.execute(f"CREATE VIEW forward AS {query}")
        source = "forward AS f"
    return f'SELECT SUM(SUMSQ(f."{value}")) AS v FROM {source}'


def _loss(con, sql) -> float:
    return float(np.asarray(con.execute(sql).fetchone()[0]))


def _direction(array: np.ndarray, rng) -> np.ndarray:
    """Random values where the tensor is not zero, zeros elsewhere: absent tiles stay absent, and a zero
    entry stays on the kink of RELU, LEAST, GREATEST or ABS where it sits (a central difference there is
    the mean of two one-sided slopes, which no gradient is)."""
    return rng.standard_normal(array.shape) * (array != 0)


def _parameters(case):
    for sql, array, _ in case.setup:
        if array is not None:
            yield _TENSOR.match(sql).group(1), array.astype(np.float64)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s:03d}")
def test_gradient_matches_central_differences(seed):
    case = build_case(seed)
    rng = np.random.default_rng(seed)
    con = _setup(case)
    try:
        loss_sql = _loss_sql(con, case)
        con.execute(f"CREATE VIEW loss AS {loss_sql}")
        base = _loss(con, loss_sql)
        if not np.isfinite(base) or abs(base) > 1e12:
            pytest.skip("the loss is not finite")
        checked = 0
        for name, array in _parameters(case):
            try:
                grad = con.execute(f"SELECT * FROM GRAD(loss, {name})").fetch_tensor(shape=array.shape)
            except trdb.ProgrammingError as exc:
                if "does not depend" in str(exc):
                    continue
                raise
            direction = _direction(array, rng)
            values = []
            for sign in (1, -1):
                other = _setup(case, (name, array + sign * EPS * direction))
                try:
                    values.append(_loss(other, _loss_sql(other, case)))
                finally:
                    other.close()
            numeric = (values[0] - values[1]) / (2 * EPS)
            analytic = float(np.sum(grad * direction))
            scale = max(abs(numeric), abs(analytic), abs(base) * 1e-3, 1e-3)
            assert abs(numeric - analytic) <= 2e-4 * scale, (
                f"{case.describe()}\nGRAD(loss, {name}) along a random direction: {analytic!r}, central "
                f"differences: {numeric!r}")
            checked += 1
    except trdb.NotSupportedError as exc:
        pytest.skip(f"not differentiable: {exc}")
    finally:
        con.close()
    if not checked:
        pytest.skip("the loss depends on no stored tensor")
