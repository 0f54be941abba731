"""CREATE TENSOR ... FROM ? with pandas, pyarrow, scipy.sparse, __array__ and DLPack inputs, with and without TILE."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import scipy.sparse

import trdb
from trdb.optimizer.tile_choice import TILE_ELEMENTS, default_tile

A = np.arange(12, dtype=np.float32).reshape(3, 4)


class DLPackOnly:
    """An array that offers only DLPack (as a torch or JAX tensor does)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class ArrayLike:
    def __array__(self, dtype=None, copy=None):
        return A


INPUTS = {
    "numpy": lambda: A,
    "pandas": lambda: pd.DataFrame(A, columns=list("abcd")),
    "pyarrow_table": lambda: pa.table({c: A[:, n] for n, c in enumerate("abcd")}),
    "pyarrow_tensor": lambda: pa.Tensor.from_numpy(A),
    "scipy_sparse": lambda: scipy.sparse.csr_matrix(A),
    "dlpack": lambda: DLPackOnly(A),
    "array_protocol": lambda: ArrayLike(),
}


@pytest.fixture(scope="module")
def con():
    connection = trdb.connect(workers=1)
    yield connection
    connection.close()


@pytest.mark.parametrize("tile", ["", " TILE (2, 3)"])
@pytest.mark.parametrize("kind", sorted(INPUTS))
def test_each_input_loads_with_and_without_tile(con, kind, tile):
    name = f"{kind}_{len(tile)}"
    con.execute(f"CREATE TENSOR {name} FROM ?{tile}", [INPUTS[kind]()])
    np.testing.assert_array_equal(con.sql(f"SELECT * FROM {name}").tensor(), A)
    described = {row[0]: row for row in con.execute(f"DESCRIBE {name}").fetchall()}
    assert described["v"][4] == ("[2, 3]" if tile else "[3, 4]")  # small: one tile holds it all


def test_torch_tensor_through_dlpack(con):
    torch = pytest.importorskip("torch")
    con.execute("CREATE TENSOR from_torch FROM ?", [torch.arange(12, dtype=torch.float32).reshape(3, 4)])
    np.testing.assert_array_equal(con.sql("SELECT * FROM from_torch").tensor(), A)


def test_the_chosen_tile_follows_the_cost_model():
    assert TILE_ELEMENTS == 65536
    assert default_tile((1024, 1024)) == (512, 1024) and default_tile((10, 100000)) == (10, 32768)
    assert default_tile((3, 5)) == (3, 5) and default_tile(()) == () and default_tile((100, 100, 100)) == (64, 64, 64)
    # a larger dense tensor: tiles as large as leave each worker two; from 2^22 elements on, tiles of 2^22
    assert default_tile((2048, 1024), workers=2) == (1024, 512) and default_tile((2048, 1024), workers=16) == (256, 256)
    assert default_tile((2048, 2048), workers=2) == (2048, 2048) == default_tile((4096, 4096), workers=2)
    assert default_tile((2048, 2048), workers=16) == (2048, 2048) and default_tile((4096, 64), workers=2) == (1024, 64)
    assert default_tile((8192, 1024), workers=2) == (4096, 1024) and default_tile((2047, 2048), workers=2) == (512, 1024)
    assert default_tile((4096, 4096), elements=TILE_ELEMENTS) == (256, 256)


def test_a_tile_left_out_is_chosen_for_the_sessions_workers():
    con = trdb.connect()
    con.execute("SET workers = 2")
    con.execute("CREATE TENSOR dense FROM ?", [np.ones((2048, 512), np.float32)])
    con.execute("CREATE TENSOR sparse FROM ?", [scipy.sparse.eye(2048, format="csr", dtype=np.float32)])
    tiles = {row[0]: row[3] for row in con.execute("SHOW TENSORS").fetchall()}
    assert tiles == {"dense": "[512, 512]", "sparse": "[256, 256]"}


def test_the_chosen_tile_leaves_every_worker_its_working_tiles_within_memory_limit():
    assert default_tile((4096, 4096), workers=2, budget=64 << 20) == (1024, 1024)  # 3 x 2 x 4 MiB fit, 16 MiB do not
    assert default_tile((1024, 1024), workers=2, budget=1 << 20) == (256, 256)
    assert default_tile((4096, 4096), workers=2, budget=8 << 30) == (2048, 2048)
    con = trdb.connect()
    con.execute("SET workers = 2")
    con.execute("SET memory_limit = '16MB'")
    a = np.random.default_rng(2).standard_normal((2048, 2048))  # float64: a 2048 x 2048 tile is 32 MiB
    con.execute("CREATE TENSOR A FROM ?", [a])
    # trdb's budget is the limit less DuckDB's part (at most half): 2 workers x 3 tiles of 256 x 256 float64
    assert {row[0]: row[3] for row in con.execute("SHOW TENSORS").fetchall()} == {"A": "[256, 256]"}
    (total,) = con.execute("SELECT SUM(SUMSQ(A.v)) AS v FROM A").fetchone()  # the whole result is over the limit
    assert float(np.asarray(total)) == pytest.approx(float(np.sum(a * a)), rel=1e-9)


def test_tensors_left_in_different_chosen_tiles_are_refused_with_a_hint_and_einsum_retiles():
    con = trdb.connect()
    con.execute("SET workers = 2")
    a = np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((2048, 1024)).astype(np.float32)
    con.execute("CREATE TENSOR A FROM ?", [a])  # 2048 x 2048 tiles
    con.execute("CREATE TENSOR B FROM ?", [b])  # 1024 x 512 tiles
    with pytest.raises(trdb.ProgrammingError, match="do not align") as refused:
        con.execute("SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j")
    assert "stored in different tiles (2048x2048 and 1024x512)" in str(refused.value)
    assert "matching TILE" in str(refused.value) and "EINSUM" in str(refused.value)
    with pytest.raises(trdb.ProgrammingError, match="matching TILE") as refused:
        con.execute("SELECT A.i, A.j, A.v + T.v AS v FROM A JOIN A AS T ON A.i = T.i AND A.j = T.j "
                    "JOIN B ON A.i = B.i WHERE SUMSQ(A.v - B.v) > 0")
    assert "EINSUM" not in str(refused.value)  # an elementwise kernel: EINSUM would not do
    product = con.execute("SELECT * FROM EINSUM('ij,jk->ik', A, B)").fetch_tensor()
    expected = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(product, expected, atol=2e-3 * np.abs(expected).max())


def test_refused_inputs_name_what_is_accepted(con):
    with pytest.raises(trdb.ProgrammingError, match="pandas DataFrame"):
        con.execute("CREATE TENSOR bad FROM ?", [{"a": 1}])
    with pytest.raises(trdb.ProgrammingError, match="not numbers"):
        con.execute("CREATE TENSOR bad FROM ?", [pd.DataFrame({"a": ["x", "y"]})])
