"""SortExec past its memory budget: sorted runs spilled, then merged in the in-memory sort's order (stable)."""

import numpy as np
import pytest

import trdb
from helpers.spilling import run_operator, spill_files
from trdb.execution.operators import sort
from trdb.execution.operators.operator import ExecContext
from trdb.execution.operators.rows_scan import RowsScanExec
from trdb.execution.operators.sort import SortExec
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.storage.memory import MemoryManager, unlimited
from trdb.storage.spill import SpillDirectory

pytestmark = pytest.mark.on_cpu  # of host memory_limit (conftest.py)


def _rows(count=1500):
    """(key with NULLs and ties, float key, sequence number, tile): the sequence shows stability."""
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 20, count)
    return [(None if k == 0 else int(k), float(rng.integers(0, 3)), n, rng.standard_normal((2, 2)))
            for n, k in enumerate(keys)]


def _run(operator, memory, tmp_path):
    return run_operator(operator, memory, tmp_path / "spill")


@pytest.mark.parametrize("descending", [(False, False), (True, False), (False, True), (True, True)])
def test_the_external_sort_gives_the_in_memory_order(descending, tmp_path):
    rows = _rows()
    expected = _run(SortExec(RowsScanExec(rows), (0, 1), descending), unlimited(), tmp_path)
    operator = SortExec(RowsScanExec(rows), (0, 1), descending)
    got = _run(operator, MemoryManager(64 << 10), tmp_path)
    assert [r[:3] for r in got] == [r[:3] for r in expected]
    assert all(np.array_equal(a[3], b[3]) for a, b in zip(got, expected))
    assert operator.metrics.spilled_bytes > 0
    assert not spill_files(tmp_path / "spill")


def test_numpy_is_the_oracle_of_the_order(tmp_path):
    rows = _rows()
    got = _run(SortExec(RowsScanExec(rows), (0, 1), (True, False)), MemoryManager(64 << 10), tmp_path)
    # NULLs first when descending; then the key descending, the float ascending, input order on ties
    order = sorted(range(len(rows)), key=lambda n: (rows[n][0] is not None, -(rows[n][0] or 0), rows[n][1], n))
    assert [r[2] for r in got] == order


def test_many_runs_merge_in_several_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(sort, "MERGE_FAN_IN", 2)
    rows = _rows()
    expected = _run(SortExec(RowsScanExec(rows), (1, 0), (False, True)), unlimited(), tmp_path)
    got = _run(SortExec(RowsScanExec(rows), (1, 0), (False, True)), MemoryManager(64 << 10), tmp_path)
    assert [r[:3] for r in got] == [r[:3] for r in expected]
    assert not spill_files(tmp_path / "spill")


def test_closing_during_the_merge_removes_the_runs(tmp_path):
    operator = SortExec(RowsScanExec(_rows()), (0,), (False,))
    operator.open(ExecContext(NUMPY_BACKEND, None, memory=MemoryManager(64 << 10),
                              spill=SpillDirectory(str(tmp_path / "spill"))))
    assert operator.next_batch()  # as under a LIMIT: the first rows, then close
    assert spill_files(tmp_path / "spill")
    operator.close()
    assert not spill_files(tmp_path / "spill")


# ---------------------------------------------------------------- through SQL

def test_order_by_spills_and_keeps_the_order(tmp_path):
    with trdb.connect() as con:
        con.execute(f"SET temp_directory = '{tmp_path / 'spill'}'")
        cur = con.cursor()
        a = np.random.default_rng(4).standard_normal((256, 64))
        cur.execute("CREATE TENSOR A FROM ? TILE (4, 8)", [a])
        query = "SELECT A.i, A.j, A.v FROM A ORDER BY j DESC, i"
        expected = [(i, j) for j in reversed(range(8)) for i in range(64)]
        con.execute("SET memory_limit = '64KB'")
        for offset in (0, 100, 300, 500):
            rows = cur.execute(f"{query} LIMIT 12 OFFSET {offset}").fetchall()
            assert [r[:2] for r in rows] == expected[offset:offset + 12]
            assert all(np.array_equal(v, a[i * 4:i * 4 + 4, j * 8:j * 8 + 8]) for i, j, v in rows)
        plan = [line[0] for line in cur.execute(f"EXPLAIN ANALYZE {query} LIMIT 3").fetchall()]
        assert "spilled=" in next(line for line in plan if "SortExec" in line)
        assert not spill_files(tmp_path / "spill")


@pytest.mark.parametrize("descending", [False, True])
def test_one_value_tiles_sort_by_their_value_nan_above_every_number_spilled_or_not(descending, tmp_path):
    """A key column of 0-d tiles (ORDER BY SUMSQ(A.v)), ties, NaN and NULL among them: the spilled runs merge in
    the in-memory order, which is numpy's sort of the values (NaN after every number, NULL after NaN)."""
    rng = np.random.default_rng(8)
    values = rng.integers(0, 30, 1500).astype(np.float32)
    values[rng.random(1500) < 0.05] = np.nan
    rows = [(None if n % 97 == 0 else np.array(v), n, rng.standard_normal((2, 2))) for n, v in enumerate(values)]
    expected = _run(SortExec(RowsScanExec(rows), (0,), (descending,)), unlimited(), tmp_path)
    operator = SortExec(RowsScanExec(rows), (0,), (descending,))
    got = _run(operator, MemoryManager(64 << 10), tmp_path)
    assert [r[1] for r in got] == [r[1] for r in expected] and operator.metrics.spilled_bytes > 0
    rank = {n: (row[0] is None, row[0] is not None and bool(np.isnan(row[0])),
                0.0 if row[0] is None or np.isnan(row[0]) else float(row[0])) for n, row in enumerate(rows)}
    order = sorted(range(len(rows)), key=lambda n: rank[n], reverse=descending)  # stable both ways, as the sort
    assert [r[1] for r in got] == order


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("nulls_first", [False, True])
def test_nulls_first_or_last_spilled_or_not(descending, nulls_first, tmp_path):
    """NULLS FIRST / LAST in either direction: spilled runs merge in the in-memory order, Python's sort's."""
    rows = _rows()
    expected = _run(SortExec(RowsScanExec(rows), (0,), (descending,), (nulls_first,)), unlimited(), tmp_path)
    operator = SortExec(RowsScanExec(rows), (0,), (descending,), (nulls_first,))
    got = _run(operator, MemoryManager(64 << 10), tmp_path)
    assert [r[2] for r in got] == [r[2] for r in expected] and operator.metrics.spilled_bytes > 0
    values = sorted((r for r in rows if r[0] is not None), key=lambda r: r[0], reverse=descending)
    nulls = [r for r in rows if r[0] is None]
    assert [r[2] for r in got] == [r[2] for r in (nulls + values if nulls_first else values + nulls)]
