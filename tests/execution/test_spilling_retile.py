"""RetileExec past its memory budget: tiles spilled as sorted runs, then cut one new tile row at a time."""

import numpy as np
import pytest
import scipy.sparse

import trdb
from helpers.spilling import run_operator, spill_files
from trdb.execution.operators.operator import ExecContext
from trdb.execution.operators.retile import RetileExec
from trdb.execution.operators.rows_scan import RowsScanExec
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.storage.memory import MemoryManager, unlimited
from trdb.storage.spill import SpillDirectory

pytestmark = pytest.mark.on_cpu  # of host memory_limit (conftest.py)

OLD = (8, 8)


def _tiles(matrix, sparse: bool) -> list:
    """(i, j, tile) of a matrix cut into OLD tiles (edge tiles smaller); all-zero tiles absent, input shuffled."""
    rows = []
    for i in range(0, matrix.shape[0], OLD[0]):
        for j in range(0, matrix.shape[1], OLD[1]):
            tile = matrix[i:i + OLD[0], j:j + OLD[1]]
            if np.count_nonzero(tile):
                rows.append((i // OLD[0], j // OLD[1], scipy.sparse.csr_array(tile) if sparse else tile.copy()))
    order = np.random.default_rng(0).permutation(len(rows))
    return [rows[n] for n in order]


def _retile(rows, new, extent, partition=0, partitions=1):
    return RetileExec(RowsScanExec(rows), 2, OLD, new, extent, np.dtype(np.float64), partition, partitions)


def _run(operator, memory, tmp_path):
    return run_operator(operator, memory, tmp_path / "spill")


def _assemble(rows, new, shape) -> np.ndarray:
    out = np.zeros(shape)
    for i, j, tile in rows:
        tile = tile.toarray() if scipy.sparse.issparse(tile) else tile
        out[i * new[0]:i * new[0] + tile.shape[0], j * new[1]:j * new[1] + tile.shape[1]] = tile
    return out


def _matrix(sparse: bool) -> np.ndarray:
    rng = np.random.default_rng(3)
    if not sparse:
        return rng.standard_normal((100, 90))
    matrix = rng.standard_normal((300, 290))
    matrix[rng.random(matrix.shape) > 0.05] = 0
    return matrix


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize("new", [(12, 20), (5, 7), (32, 16)])
@pytest.mark.parametrize("extent", [(100, 90), (None, None)], ids=["known", "unknown"])
def test_a_spilled_retile_cuts_the_in_memory_tiles(sparse, new, extent, tmp_path):
    matrix = _matrix(sparse)
    extent = extent if extent[0] is None else matrix.shape
    rows = _tiles(matrix, sparse)
    expected = _run(_retile(rows, new, extent), unlimited(), tmp_path)
    operator = _retile(rows, new, extent)
    got = _run(operator, MemoryManager(64 << 10), tmp_path)
    assert [r[:2] for r in got] == [r[:2] for r in expected]
    for have, want in zip(got, expected):
        assert type(have[2]) is type(want[2])  # CSR where the in-memory retile makes CSR
        assert np.array_equal(_assemble([have], new, matrix.shape), _assemble([want], new, matrix.shape))
    assert np.array_equal(_assemble(got, new, matrix.shape), matrix)
    assert operator.metrics.spilled_bytes > 0
    assert not spill_files(tmp_path / "spill")


def test_each_partition_cuts_its_share_when_spilled(tmp_path):
    matrix = _matrix(False)
    rows = _tiles(matrix, False)
    parts = [_run(_retile(rows, (12, 20), (100, 90), p, 3), MemoryManager(64 << 10), tmp_path) for p in range(3)]
    assert np.array_equal(_assemble([r for part in parts for r in part], (12, 20), matrix.shape), matrix)


def test_closing_during_the_output_removes_the_runs(tmp_path):
    operator = _retile(_tiles(_matrix(False), False), (5, 7), (100, 90))
    operator.open(ExecContext(NUMPY_BACKEND, None, memory=MemoryManager(64 << 10),
                              spill=SpillDirectory(str(tmp_path / "spill"))))
    assert operator.next_batch()
    assert spill_files(tmp_path / "spill")
    operator.close()
    assert not spill_files(tmp_path / "spill")


def test_retile_through_sql_spills_with_the_same_tiles(tmp_path):
    with trdb.connect() as con:
        con.execute(f"SET temp_directory = '{tmp_path / 'spill'}'")
        cur = con.cursor()
        a = np.random.default_rng(6).standard_normal((96, 80))
        cur.execute("CREATE TENSOR A FROM ? TILE (8, 8)", [a])
        con.execute("SET memory_limit = '64KB'")
        query = "SELECT R.i, R.j, R.v FROM RETILE(A, (12, 20)) AS R ORDER BY i, j"
        rows = []
        for offset in range(0, 32, 8):
            rows += cur.execute(f"{query} LIMIT 8 OFFSET {offset}").fetchall()
        assert [r[:2] for r in rows] == [(i, j) for i in range(8) for j in range(4)]
        assert np.array_equal(_assemble(rows, (12, 20), a.shape), a)
        plan = [line[0] for line in cur.execute(f"EXPLAIN ANALYZE {query} LIMIT 1").fetchall()]
        assert "spilled=" in next(line for line in plan if "RetileExec" in line)
        assert not spill_files(tmp_path / "spill")
