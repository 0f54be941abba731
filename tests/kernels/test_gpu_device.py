"""Statements on a GPU (`device = 'gpu'`, CuPy) against numpy and the same statements on the CPU.

Skipped where CuPy sees no CUDA device (CI has none); run on a machine with one.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import trdb
from helpers.mlp_views import load_small_mlp, mlp_grad_w1
from trdb.kernels.cupy_backend import CUPY_BACKEND

pytestmark = pytest.mark.skipif(not CUPY_BACKEND.is_available(), reason="needs cupy and a CUDA device")


@pytest.fixture(params=["cpu", "gpu"])
def device_cur(request, tmp_path):
    with trdb.connect(str(tmp_path / "db.trdb")) as con:
        con.execute(f"SET device = '{request.param}'")
        yield con.cursor()


def rng_matrix(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_a_tiled_matmul_on_the_gpu_equals_numpy(device_cur):
    A, B = rng_matrix((256, 192), 1), rng_matrix((192, 128), 2)
    device_cur.execute("CREATE TENSOR A FROM ? TILE (64, 64)", [A])
    device_cur.execute("CREATE TENSOR B FROM ? TILE (64, 64)", [B])
    got = device_cur.execute("SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i "
                             "GROUP BY A.i, B.j").fetch_tensor()
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    np.testing.assert_allclose(got, A @ B, rtol=1e-4, atol=1e-4)


def test_stored_results_of_a_gpu_statement_are_read_back_on_the_cpu(device_cur):
    A = rng_matrix((128, 128), 3)
    device_cur.execute("CREATE TENSOR A FROM ? TILE (32, 32)", [A])
    device_cur.execute("CREATE TENSOR C AS SELECT A.i, A.j, SIGMOID(A.v * 2.0) AS v FROM A")
    device_cur.execute("SET device = 'cpu'")
    np.testing.assert_allclose(device_cur.execute("SELECT * FROM C").fetch_tensor(), 1 / (1 + np.exp(-2 * A)),
                               rtol=1e-5, atol=1e-6)


def test_einsum_on_the_gpu_equals_numpy(device_cur):
    A, B, C = rng_matrix((128, 32), 4), rng_matrix((32, 128), 5), rng_matrix((128, 16), 6)
    for name, array in (("A", A), ("B", B), ("C", C)):
        device_cur.execute(f"CREATE TENSOR {name} FROM ? TILE (32, 16)", [array])
    got = device_cur.execute("SELECT * FROM EINSUM('ij,jk,kl->il', A, B, C)").fetch_tensor()
    np.testing.assert_allclose(got, np.einsum("ij,jk,kl->il", A, B, C, optimize=True), rtol=1e-3, atol=1e-3)


def test_a_csr_tensor_times_a_dense_one_on_the_gpu_equals_scipy(device_cur):
    S = scipy.sparse.random(200, 150, density=0.02, format="csr", dtype=np.float32, random_state=7)
    X = rng_matrix((150, 16), 8)
    device_cur.execute("CREATE TENSOR S FROM ? TILE (50, 50)", [S])
    device_cur.execute("CREATE TENSOR X FROM ? TILE (50, 16)", [X])
    got = device_cur.execute("SELECT S.i, X.j, SUM(MATMUL(S.v, X.v)) AS v FROM S JOIN X ON S.j = X.i "
                             "GROUP BY S.i, X.j").fetch_tensor()
    np.testing.assert_allclose(got, S @ X, rtol=1e-4, atol=1e-5)
    assert device_cur.execute("SELECT * FROM S").fetch_sparse().nnz == S.nnz


def test_grad_on_the_gpu_equals_numpy(device_cur):
    tensors = load_small_mlp(device_cur)
    got = device_cur.execute("SELECT * FROM GRAD(loss, W1)").fetch_tensor()
    np.testing.assert_allclose(got, mlp_grad_w1(tensors), rtol=1e-4, atol=1e-4)


def test_minimize_on_the_gpu_trains_as_on_the_cpu(tmp_path):
    trained = {}
    for device in ("cpu", "gpu"):
        with trdb.connect(str(tmp_path / f"{device}.trdb")) as con:
            con.execute(f"SET device = '{device}'")
            load_small_mlp(con.cursor(), rows=16)
            con.execute("MINIMIZE loss WRT (W1, W2) WITH (optimizer = 'adam', learning_rate = 0.01, steps = 5)")
            trained[device] = [con.execute(f"SELECT * FROM {w}").fetch_tensor() for w in ("W1", "W2")]
    for cpu, gpu in zip(trained["cpu"], trained["gpu"]):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-5)


def test_a_gpu_statement_past_its_device_budget_spills_and_gives_the_same_sums(tmp_path):
    with trdb.connect(str(tmp_path / "db.trdb")) as con:
        con.execute("CREATE TENSOR A SHAPE (1024, 512) TILE (64, 64) FILL RANDOM_UNIFORM(0, 1, 3)")
        con.execute("SET device = 'gpu'")
        con.execute("SET workers = 1")
        con.execute("SET gpu_memory_limit = '64KB'")
        dense = con.execute("SELECT * FROM A").fetch_tensor()
        got = con.execute("SELECT A.j, SUM(A.v) FROM A GROUP BY A.j ORDER BY A.j").fetchall()
        for j, tile in got:
            np.testing.assert_allclose(tile, dense[:, 64 * j:64 * j + 64].reshape(16, 64, 64).sum(axis=0),
                                       rtol=1e-5)
        file = con._session().db.file
        assert file.device_memory is not None and 0 < file.device_memory.peak
        plan = "\n".join(r[0] for r in con.execute(
            "EXPLAIN ANALYZE SELECT A.j, SUM(A.v) FROM A GROUP BY A.j ORDER BY A.j").fetchall())
        assert "spilled=" in plan


def test_many_workers_share_one_gpu(tmp_path):
    A = rng_matrix((512, 512), 9)
    with trdb.connect(str(tmp_path / "db.trdb")) as con:
        con.execute("SET device = 'gpu'")
        con.execute("SET workers = 8")
        con.execute("CREATE TENSOR A FROM ? TILE (64, 64)", [A])
        got = con.execute("SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN A AS B ON A.j = B.i "
                          "GROUP BY A.i, B.j").fetch_tensor()
        np.testing.assert_allclose(got, A @ A, rtol=1e-4, atol=1e-3)
