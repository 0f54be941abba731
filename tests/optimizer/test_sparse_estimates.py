"""Statistics and estimates: absent tiles and CSR non-zeros scale FLOPs and bytes; distinct keys are counted."""
from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse

from trdb.config.unit_costs import CSR_MAX_DENSITY, SPARSE_FLOP_COST

MATMUL = "SELECT {0}.i, X.j, SUM(MATMUL({0}.v, X.v)) AS v FROM {0} JOIN X ON {0}.j = X.i GROUP BY {0}.i, X.j"


def _estimate(cur, query: str, operator: str, field: str) -> float:
    line = next(r[0] for r in cur.execute("EXPLAIN " + query) if operator in r[0])
    number, unit = re.search(rf"{field}=([\d.]+)([KMG]?)", line).groups()
    return float(number) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[unit]


@pytest.fixture
def tensors(cur):
    n, density = 1024, 0.01
    sparse = scipy.sparse.random(n, n, density=density, format="csr", dtype=np.float32, random_state=1)
    cur.execute("CREATE TENSOR S FROM ? TILE (256, 256)", [sparse])
    cur.execute("CREATE TENSOR D FROM ? TILE (256, 256)", [np.ones((n, n), np.float32)])
    cur.execute("CREATE TENSOR X FROM ? TILE (256, 32)", [np.ones((n, 32), np.float32)])
    cur.execute("SET workers = 1")
    cur.execute("SET dense_einsum_bytes = 0")  # tile products (no DenseEinsum: dense_products)
    return cur, density


def test_csr_tiles_are_stored_so(tensors):
    cur, density = tensors
    assert density < CSR_MAX_DENSITY
    csr_tuples = cur.execute("DESCRIBE S").fetchall()[-1][-1]
    assert csr_tuples == 16


def test_sparse_kernels_cost_their_non_zeros(tensors):
    cur, density = tensors
    dense = _estimate(cur, MATMUL.format("D"), "HashAggregateExec", "flops")
    sparse = _estimate(cur, MATMUL.format("S"), "HashAggregateExec", "flops")
    kernel_share = sparse / dense
    assert kernel_share == pytest.approx(density * SPARSE_FLOP_COST, rel=0.35)


def test_csr_tiles_weigh_their_non_zeros(tensors):
    cur, density = tensors
    dense = _estimate(cur, "SELECT * FROM D", "TensorScanExec", "bytes")
    sparse = _estimate(cur, "SELECT * FROM S", "TensorScanExec", "bytes")
    assert sparse < 5 * density * dense


def test_absent_tiles_are_not_counted(cur):
    block = np.zeros((1024, 1024), np.float32)
    block[:256, :256] = 1.0
    cur.execute("CREATE TENSOR B FROM ? TILE (256, 256)", [scipy.sparse.csr_matrix(block)])  # sparse on purpose
    cur.execute("CREATE TENSOR X FROM ? TILE (256, 32)", [np.ones((1024, 32), np.float32)])
    cur.execute("SET workers = 1")
    assert _estimate(cur, "SELECT * FROM B", "TensorScanExec", "tuples") == 1


def test_distinct_keys_are_counted_and_estimate_groups(cur):
    block = np.zeros((1024, 1024), np.float32)
    block[:256, :] = 1.0  # one row of tiles: i takes 1 value, j takes 4
    cur.execute("CREATE TENSOR B FROM ? TILE (256, 256)", [scipy.sparse.csr_matrix(block)])  # sparse on purpose
    cur.execute("SET workers = 1")
    assert cur.connection._session().catalog.tensor("B").distinct_keys == (1, 4)
    assert _estimate(cur, "SELECT B.i, SUM(B.v) AS v FROM B GROUP BY B.i", "HashAggregateExec", "tuples") == 1
    assert _estimate(cur, "SELECT B.j, SUM(B.v) AS v FROM B GROUP BY B.j", "HashAggregateExec", "tuples") == 4
    cur.execute("INSERT INTO B VALUES (3, 3, ?)", [np.ones((256, 256), np.float32)])
    assert cur.connection._session().catalog.tensor("B").distinct_keys == (2, 4)
