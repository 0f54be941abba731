"""HashAggregateExec past its memory budget: partial states spill to partitions and merge to the in-memory results."""

import numpy as np
import pytest
import scipy.sparse

import trdb
from helpers.spilling import run_operator, spill_files
from trdb.execution.operators import hash_aggregate
from trdb.execution.operators.hash_aggregate import HashAggregateExec
from trdb.execution.operators.operator import ExecContext
from trdb.execution.operators.rows_scan import RowsScanExec
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.plan import expressions as bx
from trdb.plan.logical import AggregateCall
from trdb.plan.types import KEY, Column, TensorType
from trdb.storage.memory import MemoryManager, unlimited
from trdb.storage.spill import SpillDirectory

pytestmark = pytest.mark.on_cpu  # of host memory_limit (conftest.py)

TILE = (8, 8)
FUNCTIONS = ("SUM", "AVG", "MIN", "MAX", "COUNT")


def _aggregate(rows, dtype=np.float64):
    """GROUP BY column 0 with every function over the tile in column 2 (rows: (group, other key, tile))."""
    tile = TensorType(np.dtype(dtype), TILE, (None, None))
    value = bx.ColumnIndex(2, tile)
    calls = tuple(AggregateCall(f, None if f == "COUNT" else value) for f in FUNCTIONS)
    schema = (Column("g", KEY),) + tuple(Column(f.lower(), KEY if f == "COUNT" else tile) for f in FUNCTIONS)
    return HashAggregateExec(RowsScanExec(rows), (bx.ColumnIndex(0, KEY),), calls, schema)


def _run(operator, memory, tmp_path):
    return run_operator(operator, memory, tmp_path / "spill")


def _dense_rows(groups=40, per_group=6):
    rng = np.random.default_rng(7)
    return [(g, n, rng.standard_normal(TILE)) for n in range(per_group) for g in range(groups)]


def _sparse_rows(groups=40, per_group=6):
    rows = []
    for n in range(per_group):
        for g in range(groups):
            tile = scipy.sparse.random(*TILE, density=0.2, random_state=g * 31 + n, format="csr")
            rows.append((g, n, scipy.sparse.csr_array(tile)))
    return rows


def _assert_same(expected: list, got: list) -> None:
    expected, got = sorted(expected, key=lambda r: r[0]), sorted(got, key=lambda r: r[0])
    assert [r[0] for r in expected] == [r[0] for r in got]
    for want, have in zip(expected, got):
        assert want[-1] == have[-1]  # COUNT
        for a, b in zip(want[1:-1], have[1:-1]):
            assert type(a) is type(b)  # CSR stays CSR, dense stays dense
            a = a.toarray() if scipy.sparse.issparse(a) else a
            b = b.toarray() if scipy.sparse.issparse(b) else b
            assert np.allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("make_rows", [_dense_rows, _sparse_rows], ids=["dense", "csr"])
def test_spilled_groups_merge_to_the_in_memory_results(make_rows, tmp_path):
    rows = make_rows()
    expected = _run(_aggregate(rows), unlimited(), tmp_path)
    operator = _aggregate(rows)
    got = _run(operator, MemoryManager(64 << 10), tmp_path)
    _assert_same(expected, got)
    assert operator.metrics.spilled_bytes > 0
    assert operator.metrics.peak_memory <= (32 << 10) + operator._minimum()
    assert not spill_files(tmp_path / "spill")


def test_numpy_is_the_oracle_of_the_spilled_aggregate(tmp_path):
    rows = _dense_rows(groups=30, per_group=5)
    got = _run(_aggregate(rows), MemoryManager(64 << 10), tmp_path)
    for group, total, mean, low, high, count in got:
        tiles = np.stack([r[2] for r in rows if r[0] == group])
        assert count == 5
        assert np.allclose(total, tiles.sum(0)) and np.allclose(mean, tiles.mean(0))
        assert np.array_equal(low, tiles.min(0)) and np.array_equal(high, tiles.max(0))


def test_a_partition_too_large_to_merge_is_split_again(tmp_path, monkeypatch):
    monkeypatch.setattr(hash_aggregate, "PARTITIONS", 2)  # few partitions: each is larger than the budget
    splits = []
    split = HashAggregateExec._repartition
    monkeypatch.setattr(HashAggregateExec, "_repartition",
                        lambda self, groups, rest, depth: splits.append(depth) or split(self, groups, rest, depth))
    rows = _dense_rows(groups=120, per_group=3)
    expected = _run(_aggregate(rows), unlimited(), tmp_path)
    got = _run(_aggregate(rows), MemoryManager(64 << 10), tmp_path)
    _assert_same(expected, got)
    assert splits and max(splits) >= 2
    assert not spill_files(tmp_path / "spill")


def test_output_order_is_deterministic(tmp_path):
    rows = _dense_rows()
    first = _run(_aggregate(rows), MemoryManager(64 << 10), tmp_path)
    second = _run(_aggregate(rows), MemoryManager(64 << 10), tmp_path)
    assert [r[0] for r in first] == [r[0] for r in second]


def test_closing_early_removes_thespill_files(tmp_path):
    operator = _aggregate(_dense_rows(groups=300, per_group=2))  # more groups than one output batch
    operator.open(ExecContext(NUMPY_BACKEND, None, memory=MemoryManager(64 << 10),
                              spill=SpillDirectory(str(tmp_path / "spill"))))
    assert operator.next_batch()  # the input has spilled, the merge is under way
    assert spill_files(tmp_path / "spill")
    operator.close()
    assert not spill_files(tmp_path / "spill")


def test_a_failure_while_merging_removes_thespill_files(tmp_path):
    rows = _dense_rows() + [(3, 99, np.ones((4, 4)))]  # a tile of another shape: a DataError in the merge
    with pytest.raises(trdb.DataError):
        _run(_aggregate(rows), MemoryManager(64 << 10), tmp_path)
    assert not spill_files(tmp_path / "spill")


# ---------------------------------------------------------------- through SQL

@pytest.fixture
def con(tmp_path):
    connection = trdb.connect(workers=2)  # as on CI's machine: how many groups each worker holds depends on it
    connection.execute(f"SET temp_directory = '{tmp_path / 'spill'}'")
    yield connection
    connection.close()


def _window(cur, query: str, count: int, step: int) -> list:
    """The query's rows fetched in windows (ORDER BY ... LIMIT/OFFSET), so the result itself stays small."""
    rows = []
    for offset in range(0, count, step):
        rows += cur.execute(f"{query} LIMIT {step} OFFSET {offset}").fetchall()
    return rows


def _explain(cur, query: str) -> str:
    return "\n".join(line[0] for line in cur.execute("EXPLAIN ANALYZE " + query).fetchall())


def test_group_by_over_dense_tiles_spills_with_the_in_memory_results(con, tmp_path):
    """Grouped by A.j, no group is complete before the scan's last row of tiles (it reads by i, then j):
    all 16 are held at once, past the budget."""
    cur = con.cursor()
    a = np.random.default_rng(1).standard_normal((64, 128))
    cur.execute("CREATE TENSOR A FROM ? TILE (8, 8)", [a])
    query = ("SELECT A.j, SUM(A.v) AS s, AVG(A.v) AS m, MIN(A.v) AS lo, MAX(A.v) AS hi, COUNT(*) AS n "
             "FROM A GROUP BY A.j ORDER BY j")
    expected = cur.execute(query).fetchall()
    con.execute("SET memory_limit = '64KB'")
    got = _window(cur, query, 16, 4)
    _assert_same(expected, got)
    blocks = a.reshape(8, 8, 16, 8)
    for j, total, mean, low, high, count in got:
        column = blocks[:, :, j, :]
        assert count == 8 and np.allclose(total, column.sum(0)) and np.allclose(mean, column.mean(0))
        assert np.array_equal(low, column.min(0)) and np.array_equal(high, column.max(0))
    plan = _explain(cur, query + " LIMIT 2")
    assert "spilled=" in next(line for line in plan.splitlines() if "HashAggregateExec" in line)
    assert not spill_files(tmp_path / "spill")


def test_group_by_over_csr_tiles_spills_with_the_in_memory_results(con, tmp_path):
    cur = con.cursor()
    s = scipy.sparse.random(256, 512, density=0.02, random_state=3, format="csr")
    cur.execute("CREATE TENSOR S FROM ? TILE (16, 16)", [s])
    query = "SELECT S.j, SUM(S.v) AS s, MAX(S.v) AS hi, COUNT(*) AS n FROM S GROUP BY S.j ORDER BY j"
    expected = cur.execute(query).fetchall()
    con.execute("SET memory_limit = '64KB'")
    got = _window(cur, query, 32, 8)
    _assert_same(expected, got)
    assert "spilled=" in next(line for line in _explain(cur, query + " LIMIT 1").splitlines()
                              if "HashAggregateExec" in line)
    assert not spill_files(tmp_path / "spill")


def test_a_spilled_matmul_equals_numpy(con, tmp_path):
    cur = con.cursor()
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((64, 48)), rng.standard_normal((48, 64))
    cur.execute("CREATE TENSOR A FROM ? TILE (8, 8)", [a])
    cur.execute("CREATE TENSOR B FROM ? TILE (8, 8)", [b])
    con.execute("SET memory_limit = '64KB'")
    query = ("SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A, B WHERE A.j = B.i "
             "GROUP BY A.i, B.j ORDER BY i, j")
    product = a @ b
    rows = _window(cur, query, 64, 8)
    assert [r[:2] for r in rows] == [(i, j) for i in range(8) for j in range(8)]
    for i, j, tile in rows:
        assert np.allclose(tile, product[i * 8:i * 8 + 8, j * 8:j * 8 + 8])
    assert "spilled=" in next(line for line in _explain(cur, query + " LIMIT 1").splitlines()
                              if "HashAggregateExec" in line)
    assert not spill_files(tmp_path / "spill")
