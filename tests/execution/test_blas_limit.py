"""BLAS's thread count is the process's: statements of several connections at once share one limit of one
BLAS thread, lifted when the last of them ends, back to what it was before the first began."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import threadpoolctl

import trdb
from trdb.catalog.kernel_function import KernelFunction
from trdb.execution.workers import _BLAS, one_blas_thread

pytestmark = pytest.mark.on_cpu  # BLAS threads


def blas_threads() -> list[int]:
    return [blas.get_num_threads() for blas in _BLAS]


@pytest.fixture
def two_blas_threads():
    with threadpoolctl.threadpool_limits(2):
        if not _BLAS or max(blas_threads()) < 2:
            pytest.skip("BLAS runs one thread on this machine")
        yield blas_threads()


def test_a_limit_left_first_keeps_one_thread_for_the_other_and_the_last_restores_the_count(two_blas_threads):
    """Two statements on two threads: A limits, B limits, A ends while B runs, then B ends. B must still run
    one BLAS thread after A's end, and after B's the count is the one before A began (not A's one)."""
    a_entered, b_entered, a_left, during_b = threading.Event(), threading.Event(), threading.Event(), []

    def statement_a() -> None:
        with one_blas_thread():
            a_entered.set()
            assert b_entered.wait(10)
        a_left.set()

    def statement_b() -> None:
        assert a_entered.wait(10)
        with one_blas_thread():
            b_entered.set()
            assert a_left.wait(10)
            during_b.append(blas_threads())

    threads = [threading.Thread(target=statement_a), threading.Thread(target=statement_b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert during_b == [[1] * len(_BLAS)]
    assert blas_threads() == two_blas_threads


def test_nested_limits_restore_the_count_once_the_outer_one_ends(two_blas_threads):
    with one_blas_thread():
        with one_blas_thread():
            assert blas_threads() == [1] * len(_BLAS)
        assert blas_threads() == [1] * len(_BLAS)
    assert blas_threads() == two_blas_threads


def test_statements_of_two_connections_at_once_leave_blas_as_it_was(two_blas_threads, tmp_path, monkeypatch):
    """Parallel plans (their workers limit BLAS) on two connections in two threads other than the one that
    set BLAS's count last (threadpoolctl lets only that one set it), many times over: every tile product
    runs on one BLAS thread, each result is right, and BLAS's thread count afterwards is the one before."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((512, 512)).astype(np.float32)
    errors: list[BaseException] = []
    seen: list[int] = []
    real = KernelFunction.call

    def spy(function, backend, args):
        if function.name == "MATMUL":
            seen.append(max(blas_threads()))
        return real(function, backend, args)
    monkeypatch.setattr(KernelFunction, "call", spy)

    def run(n: int) -> None:
        try:
            con = trdb.connect(str(tmp_path / f"db{n}.trdb"))
            cur = con.cursor()
            cur.execute("SET workers = 2")
            cur.execute("SET min_parallel_cost = 0")
            cur.execute("SET dense_einsum_bytes = 0")
            cur.execute("CREATE TENSOR A FROM ? TILE (128, 128)", [a])
            for _ in range(15):
                got = cur.execute("SELECT A.i, T.j, SUM(MATMUL(A.v, T.v)) AS v FROM A JOIN A AS T ON A.j = T.i "
                                  "GROUP BY A.i, T.j").fetch_tensor()
                np.testing.assert_allclose(got, a.astype(np.float64) @ a, rtol=1e-3, atol=1e-3)
            con.close()
        except BaseException as exc:  # raised below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert seen and set(seen) == {1}
    assert blas_threads() == two_blas_threads
