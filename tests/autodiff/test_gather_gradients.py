"""Gradients of gathers by key (one embedding a tuple, joined by an ordinary table of triples) are scatter-adds by
key: checked against numpy's np.add.at and float64 central differences, with the joins run on column batches."""
from __future__ import annotations

import numpy as np
import pytest

from helpers.finite_differences import finite_differences
from trdb.execution.tile_math import column_join

LOSS = ("CREATE VIEW loss AS SELECT SUM(SUMSQ(H.v + Q.v - U.v)) AS v FROM triples AS X JOIN E AS H ON H.i = X.h "
        "JOIN R AS Q ON Q.i = X.r JOIN E AS U ON U.i = X.t")


@pytest.fixture
def transe(cur):
    rng = np.random.default_rng(11)
    entities, relations = rng.standard_normal((40, 4)), rng.standard_normal((3, 4))
    h, r, t = rng.integers(0, 40, 500), rng.integers(0, 3, 500), rng.integers(0, 40, 500)
    h[:5] = t[:5] = 7  # a triple whose head is its tail: both gathers add into one embedding's gradient
    cur.execute("CREATE TENSOR E FROM ? TILE (1, 4) DTYPE float64", [entities])
    cur.execute("CREATE TENSOR R FROM ? TILE (1, 4) DTYPE float64", [relations])
    cur.execute("CREATE TABLE triples (h BIGINT, r BIGINT, t BIGINT)")
    cur.execute("INSERT INTO triples VALUES " + ", ".join(f"({a}, {b}, {c})" for a, b, c in zip(h, r, t)))
    cur.execute(LOSS)
    return cur, entities, relations, (h, r, t)


def numpy_gradients(entities, relations, h, r, t):
    residual = 2 * (entities[h] + relations[r] - entities[t])
    d_entities, d_relations = np.zeros_like(entities), np.zeros_like(relations)
    np.add.at(d_entities, h, residual)
    np.add.at(d_entities, t, -residual)
    np.add.at(d_relations, r, residual)
    return d_entities, d_relations


def test_gather_gradients_are_scatter_adds_on_column_batches(transe, monkeypatch):
    cur, entities, relations, (h, r, t) = transe
    probes = []
    real = column_join.ColumnTable.probe

    def watched(self, batch, *args):
        probes.append(len(batch))
        yield from real(self, batch, *args)
    monkeypatch.setattr(column_join.ColumnTable, "probe", watched)
    d_entities, d_relations = numpy_gradients(entities, relations, h, r, t)
    np.testing.assert_allclose(cur.execute("SELECT * FROM GRAD(loss, E)").fetch_tensor(), d_entities, rtol=1e-10)
    np.testing.assert_allclose(cur.execute("SELECT * FROM GRAD(loss, R)").fetch_tensor(), d_relations, rtol=1e-10)
    assert max(probes) > 1  # the triples were joined as column batches, not a tuple at a time


def test_gather_gradients_match_central_differences(transe):
    cur, entities, relations, _ = transe
    for name, shape, picks in (("E", (40, 4), [(7, 0), (7, 3), (0, 1), (39, 2)]), ("R", (3, 4), [(0, 0), (2, 3)])):
        grad = cur.execute(f"SELECT * FROM GRAD(loss, {name})").fetch_tensor()
        expected = finite_differences(cur, "loss", name, shape, (1, 4), picks, eps=1e-5)
        for index in picks:
            assert grad[index] == pytest.approx(expected[index], rel=1e-6, abs=1e-6)


def test_an_sgd_step_of_gathered_embeddings_is_numpy_s(transe):
    cur, entities, relations, (h, r, t) = transe
    cur.execute("MINIMIZE loss WRT (E, R) WITH (optimizer = 'sgd', learning_rate = 0.01, steps = 1)")
    d_entities, d_relations = numpy_gradients(entities, relations, h, r, t)
    np.testing.assert_allclose(cur.execute("SELECT * FROM E").fetch_tensor(), entities - 0.01 * d_entities, rtol=1e-10)
    np.testing.assert_allclose(cur.execute("SELECT * FROM R").fetch_tensor(), relations - 0.01 * d_relations,
                               rtol=1e-10)
