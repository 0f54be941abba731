"""Whether a product runs on whole arrays is decided in one place (optimizer/whole_products.py) for the EINSUM
expansion and the dense_products rule alike."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import trdb

ENGINE = Path(__file__).parent.parent.parent / "engine"
EINSUM = "SELECT * FROM EINSUM('ij,jk->ik', A, B)"
JOINED = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"
# float64 operands 64 x 32 and 32 x 8, the largest intermediate of opt_einsum's path (the result) and the result
HELD = 8 * (64 * 32 + 32 * 8) + 8 * (64 * 8 + 64 * 8)


def _builds_logical_dense_einsum(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == "trdb.plan.logical" \
                and any(alias.name == "DenseEinsum" for alias in node.names):
            return True
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "lp.DenseEinsum":
            return True
    return False


def test_only_whole_products_builds_a_dense_einsum():
    builders = sorted(str(p.relative_to(ENGINE)) for p in ENGINE.rglob("*.py") if _builds_logical_dense_einsum(p))
    assert builders == ["optimizer/whole_products.py"]


@pytest.fixture
def cur():
    con = trdb.connect(workers=1)
    cur = con.cursor()
    rng = np.random.default_rng(5)
    cur.execute("CREATE TENSOR A FROM ? TILE (16, 16)", [rng.standard_normal((64, 32))])
    cur.execute("CREATE TENSOR B FROM ? TILE (16, 8)", [rng.standard_normal((32, 8))])
    yield cur
    con.close()


def _whole(cur, query: str) -> bool:
    return any("DenseEinsumExec" in row[0] for row in cur.execute("EXPLAIN " + query).fetchall())


def test_the_einsum_and_the_joined_product_go_whole_at_the_same_bytes(cur):
    assert _whole(cur, EINSUM) and _whole(cur, JOINED)
    cur.execute(f"SET dense_einsum_bytes = {HELD - 1}")
    assert not _whole(cur, EINSUM) and not _whole(cur, JOINED)
    cur.execute(f"SET dense_einsum_bytes = {HELD}")
    assert _whole(cur, EINSUM) and _whole(cur, JOINED)
