"""Sparse loads are judged by their non-zeros, not their dense size: `FROM ?` of a scipy.sparse matrix and `FROM COO`
in tiles whose dense size is far past memory_limit, the estimate of a CSR tile, and dense statements still refused."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
import scipy.sparse

import trdb
from helpers.guarded_child import run_guarded
from trdb.pipeline.limits import check_stored, check_tile, stored_tile_bytes
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_codec import csr_sections

pytestmark = pytest.mark.on_cpu  # host memory_limit; children under RLIMIT_AS, where CUDA cannot start (conftest.py)

def meta(shape, tile, dtype=np.float32) -> TensorMeta:
    return TensorMeta("A", ("i", "j")[:len(shape)], "v", np.dtype(dtype), tuple(shape), tuple(tile), "")


def settings(memory_limit=256 << 20, max_tuples=16_000_000, max_bytes=1 << 40) -> SimpleNamespace:
    return SimpleNamespace(memory_limit=memory_limit, max_tuples=max_tuples, max_bytes=max_bytes)


# ---- the estimates ------------------------------------------------------------------------------------------

def test_a_sparse_tile_is_estimated_by_its_nonzeros():
    big = meta((1_000_000, 1_000_000), (50_000, 50_000))
    nnz = 100_000
    want = sum(csr_sections(nnz, 50_000, 4, 4))  # values, column indices, row pointers (CSR32)
    assert stored_tile_bytes(big, np.array([nnz]))[0] == want < 2 << 20  # about 1 MB, not 9.31 GiB
    check_tile(settings(), big, nnz)
    check_stored(settings(), big, None, np.full(400, nnz))  # 400 tiles: the 40M-entry load
    # past CSR_MAX_DENSITY a tile is stored dense, and judged so
    small = meta((100, 100), (100, 100))
    assert stored_tile_bytes(small, np.array([999, 1001])).tolist() == [sum(csr_sections(999, 100, 4, 4)), 40_000]


def test_tiles_that_are_never_csr_are_judged_dense():
    assert stored_tile_bytes(meta((1000, 1000, 10), (1000, 1000, 10)), np.array([1]))[0] == 40_000_000  # 3-d
    assert stored_tile_bytes(meta((1000, 1000), (1000, 1000), np.float16), np.array([1]))[0] == 2_000_000


def test_a_sparse_tile_too_full_for_memory_limit_is_refused_by_its_nonzeros():
    with pytest.raises(trdb.OperationalError, match=r"one tile of TILE \(50000, 50000\) \(float32\) holding "
                                                    r"100,000,000 non-zeros is estimated at 763 MiB, more than "
                                                    r"memory_limit \(256 MiB\)") as refused:
        check_stored(settings(), meta((1_000_000, 1_000_000), (50_000, 50_000)), None, np.array([5, 100_000_000]))
    assert "SET memory_limit" in refused.value.hint


def test_a_sparse_tensor_is_judged_by_its_stored_tiles_for_max_bytes_and_max_tuples():
    big = meta((10 ** 9, 10 ** 9), (1000, 1000))  # 10**12 tiles in its grid, 3.6 EiB dense
    check_stored(settings(), big, (1 << 30, None), np.ones(10, np.int64))
    with pytest.raises(trdb.OperationalError, match=r"tensor A of SHAPE \(1000000000, 1000000000\) \(float32\) "
                                                    r"with 20,000,000 non-zeros in 20 tiles is estimated at 76.3 MiB"):
        check_stored(settings(max_bytes=50 << 20), big, None, np.full(20, 1_000_000))
    with pytest.raises(trdb.OperationalError, match=r"20 tuples.*max_tuples"):
        check_stored(settings(max_tuples=10), big, None, np.ones(20, np.int64))
    with pytest.raises(trdb.OperationalError, match="free on the database's disk"):
        check_stored(settings(), big, (1 << 20, None), np.full(20, 100_000))


def test_a_tile_whose_offsets_pass_bigint_is_refused():
    with pytest.raises(trdb.OperationalError, match=r"offsets inside a tile are BIGINT"):
        check_stored(settings(), meta((4, 2 ** 62), (4, 2 ** 62)), None, np.ones(1, np.int64))


# ---- FROM ? of a scipy.sparse matrix ------------------------------------------------------------------------

def test_a_sparse_matrix_of_a_huge_dense_size_loads_and_round_trips():
    """169,343^2 float32 is 107 GiB dense (refused as such before); 2,000 non-zeros in 21168^2 tiles load as CSR
    tiles, fetch back equal and multiply as scipy does; 10**9 x 10**9 in small tiles (10**12 in the grid)
    stores only its 10 tiles."""
    out = run_guarded("""
        n, rng = 169_343, np.random.default_rng(0)
        m = scipy.sparse.random(n, n, density=2000 / n / n, format="csr", random_state=rng, dtype=np.float32)
        cur.execute("SET memory_limit = '256MB'")
        cur.execute("CREATE TENSOR A FROM ? TILE (21168, 21168)", [m])
        got = cur.execute("SELECT * FROM A").fetch_sparse()
        print(got.shape == m.shape and abs(got - m).max() == 0)
        x = rng.standard_normal((n, 1)).astype(np.float32)
        cur.execute("CREATE TENSOR X FROM ? TILE (21168, 1)", [x])
        y = cur.execute("SELECT A.i, X.j, SUM(MATMUL(A.v, X.v)) AS v FROM A JOIN X ON A.j = X.i "
                        "GROUP BY A.i, X.j").fetch_tensor((n, 1))
        print(np.allclose(y, m @ x, rtol=1e-5, atol=1e-5))
        g = 10 ** 9
        coo = scipy.sparse.coo_matrix((np.arange(1, 11, dtype=np.float64), (np.arange(10) * (g // 10),
                                       np.arange(10) * (g // 10) + 7)), shape=(g, g))
        cur.execute("CREATE TENSOR G FROM ? TILE (1000, 1000)", [coo])
        print(cur.execute("SELECT COUNT(*), SUM(REDUCE_SUM(G.v)) FROM G").fetchone())
        print(cur.execute("SELECT G.v FROM G WHERE G.i = 200000 AND G.j = 200000").fetchone()[0][0, 7])
    """)
    assert out.split("\n")[:4] == ["True", "True", "(10, np.float64(55.0))", "3.0"], out


def test_a_sparse_matrix_with_tiles_too_full_is_refused_and_nothing_is_left(cur):
    m = scipy.sparse.random(2000, 2000, density=0.05, format="csr", random_state=1, dtype=np.float64)
    cur.execute("SET memory_limit = '32MB'")
    cur.execute("SET max_bytes = '1MB'")
    with pytest.raises(trdb.OperationalError, match=r"with 200,000 non-zeros in 1 tiles is estimated at 2.3 MiB, "
                                                    r"more than max_bytes \(1 MiB\)"):
        cur.execute("CREATE TENSOR A FROM ? TILE (2000, 2000)", [m])
    assert cur.execute("SHOW TENSORS").fetchall() == []
    cur.execute("RESET max_bytes")
    cur.execute("CREATE TENSOR A FROM ? TILE (2000, 2000)", [m])
    assert abs(cur.execute("SELECT * FROM A").fetch_sparse() - m).max() == 0


def test_a_dense_array_is_still_judged_by_its_dense_size(cur):
    cur.execute("SET memory_limit = '256MB'")
    giant = np.broadcast_to(np.float32(0), (100_000, 100_000))  # all zeros, yet dense: zeros are values
    with pytest.raises(trdb.OperationalError, match=r"one tile of TILE \(50000, 50000\) \(float32\) is estimated "
                                                    r"at 9.31 GiB, more than memory_limit \(256 MiB\)"):
        cur.execute("CREATE TENSOR A FROM ? TILE (50000, 50000)", [giant])
    with pytest.raises(trdb.OperationalError, match=r"one tile of TILE \(50000, 50000\) \(float32\) is estimated "
                                                    r"at 9.31 GiB"):
        cur.execute("CREATE TENSOR F SHAPE (1000000, 1000000) TILE (50000, 50000) FILL ZEROS")
    assert cur.execute("SHOW TENSORS").fetchall() == []


# ---- FROM COO -----------------------------------------------------------------------------------------------

def test_a_coo_load_in_tiles_far_past_memory_limit_loads_by_its_entries():
    """The 40M-entry load of benchmarks/sparse_loads.py scaled down: 400,000 entries into SHAPE (200000, 200000)
    TILE (20000, 20000), whose one tile is 1.49 GiB dense, under memory_limit = '64MB'; every value as scipy
    sums them."""
    out = run_guarded("""
        n, count, rng = 200_000, 400_000, np.random.default_rng(3)
        r, c = rng.integers(0, n, count), rng.integers(0, n, count)
        r[-50:], c[-50:] = r[:50], c[:50]  # duplicates: summed
        w = rng.uniform(0.5, 1.5, count).astype(np.float32)
        cur.execute("SET memory_limit = '64MB'")
        cur.execute("CREATE TENSOR E FROM COO ? (r, c, w) SHAPE (200000, 200000) TILE (20000, 20000)",
                    [pa.table({"r": r, "c": c, "w": w})])
        want = scipy.sparse.coo_matrix((w.astype(np.float64), (r, c)), shape=(n, n)).tocsr()
        got = cur.execute("SELECT * FROM E").fetch_sparse()
        print(cur.execute("SELECT COUNT(*) FROM E").fetchone()[0], got.nnz == want.nnz,
              float(abs(got - want).max()) < 1e-6)
    """)
    assert out.split() == ["100", "True", "True"], out


def test_a_coo_load_is_refused_by_its_fullest_tile_and_leaves_nothing(cur):
    rng = np.random.default_rng(4)
    entries = pa.table({"r": rng.integers(0, 3000, 300_000), "c": rng.integers(0, 3000, 300_000),
                        "w": np.ones(300_000, np.float32)})
    cur.execute("SET memory_limit = '32MB'")
    count = 1_700_000  # distinct entries, 10.6% of a 4000 x 4000 tile: past CSR_MAX_DENSITY, so stored dense
    with pytest.raises(trdb.OperationalError, match=r"one tile of TILE \(4000, 4000\) \(float32\) holding "
                                                    r"1,700,000 non-zeros is estimated at 61 MiB, more than "
                                                    r"memory_limit \(32 MiB\)"):
        cur.execute("CREATE TENSOR E FROM COO ? (r, c, w) SHAPE (4000, 4000) TILE (4000, 4000)",
                    [pa.table({"r": np.arange(count) % 4000, "c": np.arange(count) // 4000,
                               "w": np.ones(count, np.float32)})])
    assert cur.execute("SHOW TENSORS").fetchall() == []  # and its staged entries are gone: a load goes on
    # 3.3% full: a 2.3 MiB CSR tile, where its dense 34 MiB is past the limit
    cur.execute("CREATE TENSOR Fits FROM COO ? (r, c, w) SHAPE (3000, 3000) TILE (3000, 3000)", [entries])
    assert [row[0] for row in cur.execute("SHOW TENSORS").fetchall()] == ["Fits"]


def test_a_coo_load_of_dense_only_tiles_is_refused_before_reading(cur):
    cur.execute("SET memory_limit = '256MB'")
    with pytest.raises(trdb.OperationalError, match=r"one tile of TILE \(2000, 2000, 1000\) \(float32\) is "
                                                    r"estimated at 14.9 GiB"):
        cur.execute("CREATE TENSOR E FROM COO 'no_such_file.parquet' (a, b, c, w) SHAPE (2000, 2000, 1000) "
                    "TILE (2000, 2000, 1000)")
