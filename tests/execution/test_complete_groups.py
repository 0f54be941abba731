"""An aggregate whose groups are complete at a known number of tuples hands each on as soon as it is."""

import numpy as np
import pytest

import trdb
from helpers.spilling import run_operator, spill_files
from trdb.errors import DataError
from trdb.execution.operators.hash_aggregate import HashAggregateExec
from trdb.execution.operators.operator import ExecContext, PhysicalOperator
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.plan import expressions as bx
from trdb.plan.logical import AggregateCall
from trdb.plan.types import KEY, Column, TensorType
from trdb.storage.memory import MemoryManager, unlimited

TILE = (8, 8)


class Batches(PhysicalOperator):
    """The given batches, one per call; `pulled` counts the calls."""

    def __init__(self, batches):
        super().__init__()
        self.batches, self.pulled = list(batches), 0

    def _next(self):
        self.pulled += 1
        return self.batches.pop(0) if self.batches else None


def _sum_by_group(child, group_rows):
    tile = TensorType(np.dtype("float64"), TILE, (None, None))
    calls = (AggregateCall("SUM", bx.ColumnIndex(2, tile)), AggregateCall("COUNT", None))
    schema = (Column("g", KEY), Column("sum", tile), Column("count", KEY))
    return HashAggregateExec(child, (bx.ColumnIndex(0, KEY),), calls, schema, group_rows=group_rows)


def _rows(groups, per_group, seed=3):
    rng = np.random.default_rng(seed)
    return [(g, n, rng.standard_normal(TILE)) for n in range(per_group) for g in range(groups)]


def _sums(rows):
    return {g: sum(r[2] for r in rows if r[0] == g) for g in {r[0] for r in rows}}


class Watched(np.ndarray):
    """A tile that notes when the aggregate takes it in (its first tile of a group is copied)."""

    taken: list = []

    def copy(self, *args, **kwargs):
        Watched.taken.append(self)
        return np.asarray(self).copy()


def test_a_complete_group_is_handed_on_at_once_even_within_an_input_batch():
    watched = np.ones(TILE).view(Watched)
    first = [(0, 0, np.ones(TILE)), (0, 1, np.ones(TILE)), (1, 0, watched)]
    child = Batches([first, [(1, 1, np.ones(TILE))], [(2, 0, np.ones(TILE))]])
    aggregate = _sum_by_group(child, group_rows=2)
    aggregate.open(ExecContext(NUMPY_BACKEND, None))
    Watched.taken.clear()
    try:
        batch = aggregate.next_batch()
        assert [row[0] for row in batch] == [0] and child.pulled == 1 and not Watched.taken  # before group 1's row
        assert np.array_equal(batch[0][1], 2 * np.ones(TILE)) and batch[0][2] == 2
        assert [row[0] for row in aggregate.next_batch()] == [1] and child.pulled == 2 and Watched.taken
        assert [row[0] for row in aggregate.next_batch()] == [2]  # short of 2 tuples: handed on at the end
        assert child.pulled == 4 and aggregate.next_batch() is None
    finally:
        aggregate.close()


def test_a_group_whose_rows_a_batch_interleaves_with_anothers_is_handed_on_before_the_others_are_taken():
    # a matmul's join gives (i, k, j) in k-major order: both groups' products alternate within one batch
    watched = np.ones(TILE).view(Watched)
    batch = [(0, 0, np.ones(TILE)), (1, 0, watched), (0, 1, 2 * np.ones(TILE)), (1, 1, np.ones(TILE))]
    aggregate = _sum_by_group(Batches([batch]), group_rows=2)
    aggregate.open(ExecContext(NUMPY_BACKEND, None))
    Watched.taken.clear()
    try:
        first = aggregate.next_batch()
        assert [row[0] for row in first] == [0] and not Watched.taken  # group 1's rows not taken in yet
        np.testing.assert_array_equal(first[0][1], 3 * np.ones(TILE))
        second = aggregate.next_batch()
        assert [row[0] for row in second] == [1] and Watched.taken
        np.testing.assert_array_equal(second[0][1], 2 * np.ones(TILE))
        assert aggregate.next_batch() is None
    finally:
        aggregate.close()


def test_without_a_bound_every_group_waits_for_the_end_of_the_input():
    child = Batches([[(0, 0, np.ones(TILE)), (0, 1, np.ones(TILE))], [(1, 0, np.ones(TILE))]])
    aggregate = _sum_by_group(child, group_rows=None)
    aggregate.open(ExecContext(NUMPY_BACKEND, None))
    try:
        assert sorted(row[0] for row in aggregate.next_batch()) == [0, 1] and child.pulled == 3
    finally:
        aggregate.close()


def test_complete_groups_and_spilled_ones_add_up_to_numpy_sums(tmp_path):
    """Under a small budget some groups spill before they are complete; those finish in the merge."""
    rows = _rows(groups=40, per_group=6)
    batches = [rows[start:start + 16] for start in range(0, len(rows), 16)]
    operator = _sum_by_group(Batches(batches), group_rows=6)
    got = run_operator(operator, MemoryManager(16 << 10), tmp_path / "spill")
    assert operator.metrics.spilled_bytes > 0
    expected = _sums(rows)
    assert sorted(row[0] for row in got) == sorted(expected)
    for group, total, count in got:
        assert count == 6 and np.allclose(total, expected[group], rtol=1e-12, atol=1e-12)
    assert not spill_files(tmp_path / "spill")


def test_a_key_held_twice_is_an_error_not_a_second_group(tmp_path):
    rows = [(0, 0, np.ones(TILE)), (0, 1, np.ones(TILE)), (0, 1, np.ones(TILE))]
    with pytest.raises(DataError, match="holds one key twice"):
        run_operator(_sum_by_group(Batches([rows[:2], rows[2:]]), group_rows=2), unlimited(), tmp_path)


def _explain(cur, sql):
    return "\n".join(line[0] for line in cur.execute("EXPLAIN " + sql).fetchall())


@pytest.fixture(params=[1])
def cur(request):
    con = trdb.connect(workers=request.param, dense_einsum_bytes=0)  # tile products (no DenseEinsum: dense_products)
    yield con.cursor()
    con.close()


def test_the_planner_bounds_a_group_by_the_tiles_of_the_free_keys(cur):
    cur.execute("CREATE TENSOR A SHAPE (40, 30) TILE (8, 10) FILL ONES")  # a 5 x 3 grid
    cur.execute("CREATE TENSOR B SHAPE (30, 20) TILE (10, 10) FILL ONES")  # a 3 x 2 grid
    cur.execute("CREATE TENSOR C SHAPE (60, 20) TILE (10, 10) FILL ONES")  # a 6 x 2 grid
    matmul = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"
    assert "(complete at 3 tuples)" in _explain(cur, matmul)  # k: 3 tiles
    longer = "SELECT A.i, SUM(A.v) AS v FROM A JOIN C ON A.j = C.i GROUP BY A.i"
    assert "(complete at 6 tuples)" in _explain(cur, longer)  # A.j = C.i: min(3, 6) tiles, times C.j's 2
    assert "(complete at 3 tuples)" in _explain(cur, "SELECT A.i, SUM(A.v) AS v FROM A GROUP BY A.i")
    assert "(complete at 5 tuples)" in _explain(cur, "SELECT A.j, SUM(A.v) AS v FROM A WHERE A.i > 1 GROUP BY A.j")
    both = "SELECT A.i, A.j, SUM(A.v) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, A.j"
    assert "(complete at 2 tuples)" in _explain(cur, both)  # B.j is free
    left = "SELECT A.i, SUM(A.v) AS v FROM A LEFT JOIN B ON A.j = B.i GROUP BY A.i"
    assert "complete at" not in _explain(cur, left)


@pytest.mark.parametrize("cur", [2], indirect=True)
def test_a_partial_aggregate_is_never_bounded(cur):
    cur.execute("CREATE TENSOR A SHAPE (40, 30) TILE (8, 10) FILL ONES")
    cur.execute("CREATE TENSOR C SHAPE (60, 20) TILE (10, 10) FILL ONES")
    plan = _explain(cur, "SELECT A.i, SUM(A.v) AS v FROM A JOIN C ON A.j = C.i GROUP BY A.i")
    partial = [line for line in plan.splitlines() if "partial" in line]
    assert partial and all("complete at" not in line for line in partial)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_product_with_absent_tiles_and_a_filter_matches_numpy(workers):
    con = trdb.connect(workers=workers)
    cur = con.cursor()
    rng = np.random.default_rng(5)
    a = rng.standard_normal((48, 40))
    b = rng.standard_normal((40, 56))
    a[8:16, :] = 0  # a whole row of tiles absent
    a[:, 30:40] = 0
    b[0:10, 14:28] = 0
    cur.execute("CREATE TENSOR A FROM ? TILE (8, 10)", [a])
    cur.execute("CREATE TENSOR B FROM ? TILE (10, 14)", [b])
    sql = ("SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i WHERE B.j < 3 "
           "GROUP BY A.i, B.j")
    assert "(complete at 4 tuples)" in _explain(cur, sql)
    got = cur.execute(sql).fetch_tensor()
    expected = a @ b
    expected[:, 42:] = 0
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    con.close()
