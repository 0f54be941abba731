"""Parallel execution: worker errors, cancellation (Cursor.close, Ctrl-C), no thread left behind."""
from __future__ import annotations

import _thread
import contextlib
import threading
import time

import numpy as np
import pytest
import threadpoolctl

import trdb
from trdb.config.unit_costs import MIN_PARALLEL_COST
from trdb.optimizer.driver import RULE_NAMES


def worker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("trdb-worker")]


def wait_for_no_workers(timeout: float = 5.0) -> list[threading.Thread]:
    deadline = time.monotonic() + timeout
    while worker_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return worker_threads()


SQUARE = "SELECT {0}.i, T.j, SUM(MATMUL({0}.v, T.v)) AS v FROM {0} JOIN {0} AS T ON {0}.j = T.i GROUP BY {0}.i, T.j"


def explained(cur, query: str) -> str:
    return "\n".join(row[0] for row in cur.execute("EXPLAIN " + query))


def _numpy_blas_threads() -> int:
    """The threads numpy's BLAS may run now (other thread pools, such as PyTorch's OpenMP when a test imported
    it, are listed too and may come first)."""
    blas = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    return ([i for i in blas if "numpy" in i["filepath"]] or blas)[0]["num_threads"]


@contextlib.contextmanager
def matmul_blas_threads():
    """The BLAS threads each MATMUL kernel call ran with (BLAS allowed two), appended as they run."""
    seen: list[int] = []
    real = trdb.kernels.functions.matmul

    def spy(xp, a, b, out=None):
        seen.append(_numpy_blas_threads())
        return real(xp, a, b, out=out)

    with threadpoolctl.threadpool_limits(2), pytest.MonkeyPatch.context() as patch:
        if _numpy_blas_threads() < 2:
            pytest.skip("BLAS runs one thread on this machine")
        patch.setattr(trdb.kernels.functions, "matmul", spy)
        yield seen


@pytest.fixture(autouse=True)
def tiled_products(con):
    """Plans of products joined and summed tile by tile, not one DenseEinsum (optimizer/rules/dense_products.py)."""
    con.execute("SET dense_einsum_bytes = 0")


@pytest.fixture
def parallel(cur):
    cur.execute("SET workers = 2")
    return cur


def slow_query(cur) -> str:
    cur.execute("CREATE TENSOR S SHAPE (1536, 1536) TILE (96, 96) FILL RANDOM_NORMAL(0, 1, 3)")
    # 256 x 256 tile pairs, each an EXP over a 96 x 96 tile: seconds of work
    return "SELECT S.i, SUM(EXP(S.v) * T.v) AS v FROM S, S AS T GROUP BY S.i"


def test_matmul_plan_has_exchanges(parallel):
    parallel.execute("CREATE TENSOR A SHAPE (512, 512) TILE (128, 128) FILL ONES")
    parallel.execute("CREATE TENSOR B SHAPE (512, 512) TILE (128, 128) FILL ONES")
    plan = "\n".join(r[0] for r in parallel.execute(
        "EXPLAIN SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"))
    assert "GatherExec" in plan and ("BroadcastExec" in plan or "RepartitionExec" in plan)
    parallel.execute("SET workers = 1")
    plan = "\n".join(r[0] for r in parallel.execute("EXPLAIN SELECT A.i, A.j, A.v FROM A"))
    assert "Exec(" in plan and "Gather" not in plan


def test_small_plans_run_on_one_worker_unless_told_otherwise(parallel):
    parallel.execute(f"SET min_parallel_cost = {MIN_PARALLEL_COST}")  # the default; the test suite sets 0
    parallel.execute("CREATE TENSOR A SHAPE (2048, 2048) TILE (512, 512) FILL ONES")
    parallel.execute("CREATE TENSOR s SHAPE (64, 64) TILE (32, 32) FILL ONES")
    assert "GatherExec" in explained(parallel, SQUARE.format("A"))       # ~17 GFLOP: worth two workers
    assert "GatherExec" not in explained(parallel, SQUARE.format("s"))   # ~0.5 MFLOP: starting workers costs more
    parallel.execute("SET min_parallel_cost = 0")
    assert "GatherExec" in explained(parallel, SQUARE.format("s"))
    with pytest.raises(trdb.ProgrammingError, match="min_parallel_cost"):
        parallel.execute("SET min_parallel_cost = -1")


def test_a_plan_of_many_small_tiles_runs_on_one_worker_thread(parallel):
    # each tile's Python holds the GIL: two worker threads only contend for it (32^2 tiles: 0.4 s on one,
    # 0.74 s on two); Ray's actors are processes, and so still get the partitions
    parallel.execute(f"SET min_parallel_cost = {MIN_PARALLEL_COST}")  # the default; the test suite sets 0
    parallel.execute("CREATE TENSOR s SHAPE (1024, 1024) TILE (32, 32) FILL ONES")     # 32768 products of 32^3
    parallel.execute("CREATE TENSOR b SHAPE (2048, 2048) TILE (256, 256) FILL ONES")   # 512 products of 256^3
    assert "GatherExec" not in explained(parallel, SQUARE.format("s"))
    assert "GatherExec" in explained(parallel, SQUARE.format("b"))
    parallel.execute("SET executor = 'ray'")  # EXPLAIN plans without starting Ray
    assert "GatherExec" in explained(parallel, SQUARE.format("s"))
    parallel.execute("SET executor = 'local'")
    product = parallel.execute(SQUARE.format("s")).fetch_tensor()
    np.testing.assert_array_equal(product, np.full((1024, 1024), 1024, np.float32))


@pytest.mark.on_cpu  # BLAS threads
def test_a_plan_with_fewer_tuples_than_workers_runs_on_one_and_keeps_blas_threads(parallel):
    parallel.execute(f"SET min_parallel_cost = {MIN_PARALLEL_COST}")  # the default; the test suite sets 0
    parallel.execute("CREATE TENSOR one SHAPE (1024, 1024) TILE (1024, 1024) FILL RANDOM_NORMAL(0, 1, 1)")
    parallel.execute("CREATE TENSOR four SHAPE (1024, 1024) TILE (512, 512) FILL RANDOM_NORMAL(0, 1, 2)")
    assert "GatherExec" not in explained(parallel, SQUARE.format("one"))  # ~2 GFLOP in one product: BLAS's threads share it
    assert "GatherExec" in explained(parallel, SQUARE.format("four"))     # eight products: two workers
    with matmul_blas_threads() as seen:
        product = parallel.execute(SQUARE.format("one")).fetch_tensor()
    assert seen == [2]  # not pinned to one thread, as a small plan on one partition is
    one = parallel.execute("SELECT * FROM one").fetch_tensor().astype(np.float64)
    np.testing.assert_allclose(product, one @ one, rtol=1e-4, atol=1e-3)


@pytest.mark.on_cpu  # BLAS threads
def test_a_plan_of_few_tuples_a_worker_runs_on_one_worker_thread_and_blas_threads(parallel):
    # two products of 1024 x 512 by 512 x 1024: two partitions of one product each ran no faster than one
    # partition whose BLAS runs two threads (NNMF's steps at workers = 2: 51-54 against 40-47 ms)
    parallel.execute(f"SET min_parallel_cost = {MIN_PARALLEL_COST}")  # the default; the test suite sets 0
    a, b = (np.random.default_rng(seed).standard_normal((1024, 1024)).astype(np.float32) for seed in (5, 6))
    parallel.execute("CREATE TENSOR A FROM ? TILE (1024, 512)", [a])
    parallel.execute("CREATE TENSOR B FROM ? TILE (512, 1024)", [b])
    product = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"
    assert "GatherExec" not in explained(parallel, product)
    with matmul_blas_threads() as seen:
        got = parallel.execute(product).fetch_tensor()
    assert set(seen) == {2}
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-3)
    parallel.execute("SET executor = 'ray'")  # EXPLAIN plans without starting Ray: actors are processes
    assert "GatherExec" in explained(parallel, product)
    parallel.execute("SET executor = 'local'")


@pytest.mark.on_cpu  # BLAS threads
def test_a_small_plan_runs_memory_bound_products_on_one_blas_thread_and_matrix_products_on_all(parallel):
    parallel.execute(f"SET min_parallel_cost = {MIN_PARALLEL_COST}")  # the default; the test suite sets 0
    h, w = np.random.default_rng(3).standard_normal((8192, 1024)), np.random.default_rng(4).standard_normal((1024, 1))
    parallel.execute("CREATE TENSOR H FROM ? TILE (1024, 512)", [h.astype(np.float32)])
    parallel.execute("CREATE TENSOR W FROM ? TILE (512, 1)", [w.astype(np.float32)])
    b, g = h[1024:1088, :], h[:1024, :]
    parallel.execute("CREATE TENSOR B FROM ? TILE (64, 1024)", [b.astype(np.float32)])
    parallel.execute("CREATE TENSOR G FROM ? TILE (1024, 512)", [g.astype(np.float32)])
    product = "SELECT {0}.i, {1}.j, SUM(MATMUL({0}.v, {1}.v)) AS v FROM {0} JOIN {1} ON {0}.j = {1}.i GROUP BY {0}.i, {1}.j"
    with matmul_blas_threads() as seen:
        vector = parallel.execute(product.format("H", "W")).fetch_tensor()  # 16 matrix-vector products
        assert seen and set(seen) == {1}
        seen.clear()
        matrix = parallel.execute(product.format("B", "G")).fetch_tensor()  # 64 x 1024 by 1024 x 512 tiles
        assert seen and set(seen) == {2}
    assert "GatherExec" not in explained(parallel, product.format("B", "G"))
    np.testing.assert_allclose(vector, h @ w, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(matrix, b @ g, rtol=1e-3, atol=2e-2)


def test_explain_analyze_reports_actual_tuples_and_moved_bytes(parallel):
    parallel.execute("CREATE TENSOR A SHAPE (512, 512) TILE (128, 128) FILL ONES")
    lines = [r[0] for r in parallel.execute("EXPLAIN ANALYZE SELECT A.i, SUM(A.v) AS v FROM A GROUP BY A.i")]
    assert "actual tuples=4" in lines[0] and "moved=4 tuples/262.2KB" in lines[0]
    assert all("actual tuples=" in line for line in lines[:-2])
    assert lines[-2].startswith("Executed work: flops=")
    assert lines[-1].startswith("Optimizer rules (") and all(rule in lines[-1] for rule in RULE_NAMES)


def test_error_in_one_worker_surfaces_and_leaves_no_thread(parallel):
    parallel.execute("CREATE TENSOR A SHAPE (8, 8) TILE (4, 4) FILL ONES")
    parallel.execute("CREATE TENSOR X SHAPE (6, 10) TILE (4, 4) FILL ONES")  # edge tiles of one column differ
    for _ in range(5):
        with pytest.raises(trdb.DataError, match=r"SUM: tiles of one group have shapes"):
            parallel.execute("SELECT X.j, SUM(X.v) AS v FROM X GROUP BY X.j")
        assert wait_for_no_workers() == []
    assert parallel.execute("SELECT COUNT(*) FROM A").fetchone() == (4,)


def test_cursor_close_cancels_a_running_query(con):
    cur = con.cursor()
    cur.execute("SET workers = 2")
    query = slow_query(cur)
    outcome = {}

    def run():
        started = time.monotonic()
        try:
            cur.execute(query)
            outcome["result"] = "finished"
        except trdb.Error as exc:
            outcome["result"] = exc
        outcome["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.5)
    cur.close()
    thread.join(30)
    assert isinstance(outcome["result"], trdb.OperationalError) and "cancelled" in str(outcome["result"])
    assert wait_for_no_workers() == []
    assert con.cursor().execute("SELECT COUNT(*) FROM S").fetchone() == (256,)


def test_ctrl_c_stops_workers_and_connection_survives(parallel):
    query = slow_query(parallel)
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            parallel.execute(query)
    finally:
        timer.cancel()  # a statement that failed otherwise leaves no Ctrl-C to land in the next test
    assert wait_for_no_workers() == []
    assert parallel.execute("SELECT COUNT(*) FROM S").fetchone() == (256,)


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_same_results_at_any_worker_count(cur, workers):
    rng = np.random.default_rng(7)
    A, B = rng.standard_normal((90, 70)).astype(np.float32), rng.standard_normal((70, 50)).astype(np.float32)
    cur.execute("CREATE TENSOR A FROM ? TILE (20, 16)", [A])
    cur.execute("CREATE TENSOR B FROM ? TILE (16, 12)", [B])
    cur.execute(f"SET workers = {workers}")
    C = cur.execute("SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i "
                    "GROUP BY A.i, B.j").fetch_tensor()
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)
    totals = cur.execute("SELECT SUM(SUMSQ(A.v)), COUNT(*), MAX(REDUCE_MAX(A.v)) FROM A").fetchone()
    assert totals[1] == 25
    np.testing.assert_allclose(float(totals[0]), float((A.astype(np.float64) ** 2).sum()), rtol=1e-5)
    assert float(totals[2]) == A.max()


def test_a_leaf_is_not_hashed_on_a_key_with_fewer_values_than_workers(parallel):
    parallel.execute("CREATE TENSOR A SHAPE (512, 512) TILE (128, 128) FILL ONES")
    parallel.execute("CREATE TENSOR X SHAPE (512, 1024) TILE (128, 1024) FILL ONES")  # X.j is always 0; A is broadcast
    plan = "\n".join(r[0] for r in parallel.execute(
        "EXPLAIN SELECT A.i, X.j, SUM(MATMUL(A.v, X.v)) AS v FROM A JOIN X ON A.j = X.i GROUP BY A.i, X.j"))
    assert "hash: j)" not in plan.split("TensorScanExec(X")[1].split("\n")[0]
