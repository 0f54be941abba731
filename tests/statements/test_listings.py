"""SHOW TABLES / SHOW ALL TABLES / SHOW ALL list the user's objects and trdb's settings; SUMMARIZE against numpy."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import trdb
from trdb.config.settings import SETTINGS
from trdb.statements import summarize


@pytest.fixture
def cur():
    con = trdb.connect()
    yield con.cursor()
    con.close()


def test_listings_hide_internal_tables_and_optimizer_state(cur):
    cur.execute("CREATE TENSOR W SHAPE (2, 2) TILE (2, 2) FILL ONES")
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(W.v)) AS v FROM W")
    cur.execute("MINIMIZE loss WRT (W) WITH (optimizer = 'adam', steps = 1)")
    cur.execute("CREATE TABLE t (a INTEGER)")
    cur.execute("SHOW ALL TABLES")
    listed = cur.fetchall()
    assert [(r[1], r[2], r[-1]) for r in listed] == [("main", "loss", "view"), ("main", "t", "table"),
                                                     ("main", "W", "tensor")]
    cur.execute("SHOW TABLES")
    assert cur.fetchall() == [("loss", "view"), ("t", "table"), ("W", "tensor")]
    cur.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = '_trdb'")
    assert cur.fetchone()[0] > 0  # information_schema stays as DuckDB has it


def test_show_all_gives_the_values_in_force(cur):
    cur.execute("SET workers = 3")
    cur.execute("SET progress = on")
    cur.execute("SHOW ALL")
    values = {name: value for name, value, _ in cur.fetchall()}
    assert values["workers"] == "3" and values["progress"] == "on"
    assert set(values) == set(SETTINGS)


@pytest.mark.parametrize("chunk", [1 << 30, 1])  # one read, or a read per tile
def test_summarize_matches_numpy(cur, monkeypatch, chunk):
    monkeypatch.setattr(summarize, "CHUNK_BYTES", chunk)
    rng = np.random.default_rng(4)
    dense = rng.normal(size=(50, 30)).astype(np.float32)
    dense[20:, :] = 0  # absent tiles
    dense[:20, :10] *= rng.random((20, 10)) < 0.05  # a sparse (CSR) tile
    cur.execute("CREATE TENSOR A FROM ? TILE (10, 10)", [scipy.sparse.csr_matrix(dense)])
    cur.execute("SUMMARIZE A")
    rows = {r[0]: r for r in cur.fetchall()}
    _, dtype, low, high, _, mean, std, count, tuples, nonzeros, density = rows["v"]
    assert dtype == "TENSOR(float32)" and count == dense.size
    np.testing.assert_allclose([low, high, mean, std], [dense.min(), dense.max(), dense.mean(),
                                                        dense.std(ddof=1)], rtol=1e-6)
    assert nonzeros == np.count_nonzero(dense) and density == pytest.approx(nonzeros / dense.size)
    cur.execute("SELECT count(*) FROM A")
    assert tuples == cur.fetchone()[0] == rows["i"][7]
    assert rows["i"][2:5] == (0.0, 1.0, 2)  # keys of the stored tiles: rows 0..19 are tiles 0 and 1


def test_summarize_of_a_query_matches_its_assembled_tensor(cur):
    rng = np.random.default_rng(5)
    cur.execute("CREATE TENSOR B FROM ? TILE (4, 4)", [rng.normal(size=(10, 8)).astype(np.float32)])
    query = "SELECT B.i, B.j, RELU(B.v) AS v FROM B WHERE B.i < 2"
    cur.execute(query)
    whole = cur.fetch_tensor()
    cur.execute(f"SUMMARIZE {query}")
    value = cur.fetchall()[-1]
    np.testing.assert_allclose(value[2:4] + value[5:7], [whole.min(), whole.max(), whole.mean(), whole.std(ddof=1)],
                               rtol=1e-6)
    assert value[7] == whole.size and value[9] == np.count_nonzero(whole)
