"""Results larger than the memory budget: spooled to temp_directory, read by the cursor in pieces, removed after."""
from __future__ import annotations

import os

import numpy as np
import pytest

import trdb
from helpers.mlp_views import create_mlp_views
from trdb.errors import QueryCancelled
from trdb.execution import result as result_module
from trdb.execution.executor import Execution
from trdb.pipeline.query import Pipeline

pytestmark = pytest.mark.on_cpu  # of host memory_limit (conftest.py)

RNG = np.random.default_rng(11)
A = RNG.standard_normal((96, 96))   # 72 KB of tiles: more than a 64KB memory_limit
QUERY = "SELECT A.i, A.j, A.v * 2 AS v FROM A"


def spill_files(root) -> list:
    """trdb's spill files under a temp_directory (DuckDB's own directory aside)."""
    if not os.path.exists(root):
        return []
    return [f for d, _, files in os.walk(root) if "duckdb" not in d for f in files]


@pytest.fixture
def small(cur, tmp_path):
    cur.execute("CREATE TENSOR A FROM ? TILE (4, 4)", [A])
    cur.execute("SET memory_limit = '64KB'")
    cur.execute(f"SET temp_directory = '{tmp_path / 'spill'}'")
    return cur, tmp_path / "spill"


def assembled(rows) -> np.ndarray:
    out = np.zeros_like(A)
    for i, j, tile in rows:
        out[i * 4:i * 4 + 4, j * 4:j * 4 + 4] = tile
    return out


def test_a_result_bigger_than_the_budget_is_spilled_and_fetched_in_pieces(small):
    cur, spill = small
    cur.execute(QUERY)
    assert cur.rowcount == 576 and len(spill_files(spill)) == 1
    pieces = []
    while piece := cur.fetchmany(50):
        assert len(piece) <= 50
        pieces.append(piece)
    assert [len(p) for p in pieces] == [50] * 11 + [26]
    np.testing.assert_array_equal(assembled([row for p in pieces for row in p]), 2 * A)
    cur.close()
    assert spill_files(spill) == []


def test_fetchone_iteration_and_fetchall_read_the_spilled_rows_in_order(small):
    cur, spill = small
    expected = [row[:2] for row in cur.execute(QUERY + " ORDER BY i, j").fetchall()]
    cur.execute(QUERY + " ORDER BY i, j")
    first = cur.fetchone()
    rest = list(cur)
    assert [first[:2]] + [row[:2] for row in rest] == expected
    assert cur.fetchone() is None and cur.fetchall() == []


def test_the_spill_goes_when_the_result_is_replaced_or_the_connection_closes(small):
    cur, spill = small
    cur.execute(QUERY)
    cur.execute("SELECT 1 AS x")
    assert spill_files(spill) == []
    cur.execute(QUERY)
    other = cur.connection.cursor().execute(QUERY)
    assert len(spill_files(spill)) == 2
    assert len(other.fetchmany(3)) == 3
    cur.connection.close()
    assert spill_files(spill) == []


def test_fetch_tensor_of_a_spilled_result_past_memory_limit_fails_at_once(small, monkeypatch):
    cur, spill = small
    monkeypatch.setattr(result_module, "FETCH_FLOOR", 0)  # as if the result were gigabytes
    cur.execute(QUERY)
    cur.fetchone()
    with pytest.raises(trdb.OperationalError, match=r"holds \d+ bytes .* more than memory_limit") as failure:
        cur.fetch_tensor()
    assert "fetchmany()" in str(failure.value)
    assert len(cur.fetchall()) == 575  # nothing was taken


def test_fetch_tensor_of_a_small_spilled_result_is_right(small):
    cur, spill = small
    np.testing.assert_array_equal(cur.execute(QUERY).fetch_tensor(), 2 * A)


def test_a_failed_or_cancelled_statement_leaves_no_spill_file(small, monkeypatch):
    cur, spill = small
    original = Execution.batches

    def cancelled_midway(self):
        for n, batch in enumerate(original(self)):
            if n == 1:
                raise QueryCancelled("the statement was cancelled")
            yield batch
    monkeypatch.setattr(Execution, "batches", cancelled_midway)
    with pytest.raises(QueryCancelled):
        cur.execute(QUERY)
    assert spill_files(spill) == []


def test_the_memory_of_a_result_goes_back_when_the_cursor_closes(small):
    cur, spill = small
    memory = cur.connection._session().db.file.memory
    cur.execute("SET memory_limit = '4MB'")  # room for the result beside the operators still running
    warm = cur.connection.cursor()
    warm.execute("SELECT A.i, A.j, A.v FROM A WHERE A.i = 1").fetchall()  # A is in the buffer pool now
    warm.close()
    before = memory.reserved
    cur.execute("SELECT A.i, A.j, A.v FROM A WHERE A.i = 0")  # small: held in memory
    assert memory.reserved > before
    cur.close()
    assert memory.reserved == before


def test_grad_over_a_tiny_budget_is_right(cur, tmp_path, monkeypatch):
    X, W1, W2, Y = (RNG.standard_normal(s) for s in [(96, 8), (8, 32), (32, 4), (96, 4)])
    for name, array, tile in [("X", X, (8, 8)), ("W1", W1, (8, 8)), ("W2", W2, (8, 4)), ("Y", Y, (8, 4))]:
        cur.execute(f"CREATE TENSOR {name} FROM ? TILE {tile}", [array])
    create_mlp_views(cur)
    expected = {p: cur.execute(f"SELECT * FROM GRAD(loss, {p})").fetch_tensor() for p in ("W1", "W2")}
    cur.execute("SET memory_limit = '64KB'")
    cur.execute(f"SET temp_directory = '{tmp_path / 'spill'}'")
    spilled, original = [], Pipeline._shared_rows
    monkeypatch.setattr(Pipeline, "_shared_rows", lambda self, plan: _noted(original(self, plan), spilled))
    for param in ("W1", "W2"):
        np.testing.assert_allclose(cur.execute(f"SELECT * FROM GRAD(loss, {param})").fetch_tensor(), expected[param],
                                   rtol=1e-10)
    assert any(spilled)  # the forward pass the gradients reuse went to disk
    H = np.maximum(X @ W1, 0)
    np.testing.assert_allclose(expected["W2"], H.T @ (2 * (H @ W2 - Y)), rtol=1e-10)
    cur.execute("SELECT 1 AS x")
    assert spill_files(tmp_path / "spill") == []


def _noted(spool, spilled: list):
    spilled.append(spool.spilled)
    return spool


def test_an_empty_result_along_a_huge_axis_is_a_clear_error_from_fetch_tensor(cur):
    """No tuples along one axis, 2**62 elements along the other: numpy cannot make even that empty array
    (its raw ValueError escaped fetch_tensor; found by the fuzzer). fetch_sparse and fetchall take it."""
    cur.execute("CREATE TENSOR g SHAPE (64, 64) TILE (32, 32) FILL ONES")
    cur.execute("CREATE TENSOR f0 SHAPE (4611686018427387904) TILE (1)")  # no tile stored
    query = "SELECT A0.i AS i, A0.i AS j, A1.v AS v FROM g AS A0 JOIN f0 AS A1 ON A0.j = A1.i"
    cur.execute(query)
    with pytest.raises(trdb.OperationalError, match=r"numpy cannot make an array of the result's shape "
                                                    r"\(0, 4611686018427387904\)") as refused:
        cur.fetch_tensor()
    assert "fetch_sparse()" in refused.value.hint
    assert cur.fetch_tensor(shape=(0, 8)).shape == (0, 8)  # the rows were kept: a smaller shape takes them
    assert cur.execute(query).fetch_sparse().shape == (0, 4611686018427387904)
