"""The grace hash join: a build side the memory budget refuses goes to partition spill files, with the in-memory results."""
from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.sparse

import trdb
from helpers.spilling import spill_files
from trdb.execution.operators import hash_join
from trdb.execution.operators.hash_join import HashJoinExec
from trdb.execution.operators.operator import ExecContext, drain
from trdb.execution.operators.rows_scan import RowsScanExec
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.plan.types import KEY, Column, TensorType
from trdb.storage.memory import MemoryManager, unlimited
from trdb.storage.spill import SpillDirectory

pytestmark = pytest.mark.on_cpu  # of host memory_limit (conftest.py)

TILE = TensorType(np.dtype("float64"), (2, 2), (None, None))
SCHEMA = (Column("i", KEY), Column("j", KEY), Column("v", TILE))
RNG = np.random.default_rng(7)


def _rows(count: int, keys: int, sparse: bool = False, nulls: bool = False) -> list:
    rows = []
    for n in range(count):
        tile = RNG.standard_normal((2, 2))
        if sparse:
            tile = scipy.sparse.csr_array(np.where(tile > 0, tile, 0))
        i = None if nulls and n % 17 == 0 else int(RNG.integers(keys))
        rows.append((i, n, tile))
    return rows


def _join(kind: str, left: list, right: list, memory: MemoryManager, spill: SpillDirectory) -> tuple[list, HashJoinExec]:
    join = HashJoinExec(RowsScanExec(left), RowsScanExec(right), kind, (0,), (0,), SCHEMA, SCHEMA)
    join.open(ExecContext(NUMPY_BACKEND, None, memory=memory, spill=spill))
    try:
        out = list(drain(join))
    finally:
        join.close()
    return out, join


def _canonical(rows: list) -> list:
    """Rows comparable across runs and sortable: NULL keys first, tiles as their dense bytes."""
    def value(v):
        if v is None or isinstance(v, int):
            return (v is not None, v or 0)
        dense = v.toarray() if scipy.sparse.issparse(v) else np.asarray(v)
        return (True, dense.tobytes())
    return sorted(tuple(value(v) for v in row) for row in rows)


@pytest.mark.parametrize("kind", ["INNER", "LEFT", "FULL"])
@pytest.mark.parametrize("sparse", [False, True])
def test_a_refused_build_side_is_joined_through_partitions_with_the_same_result(tmp_path, kind, sparse):
    left, right = _rows(300, 40, sparse, nulls=True), _rows(200, 50, sparse, nulls=True)
    spill = SpillDirectory(str(tmp_path / "spill"))
    expected, in_memory = _join(kind, left, right, unlimited(), spill)
    tiny = MemoryManager(8 << 10)  # a 4 KB budget: the build side (about 8 KB) is refused
    got, grace = _join(kind, left, right, tiny, spill)
    assert in_memory.metrics.spilled_bytes == 0 and grace.metrics.spilled_bytes > 0
    assert _canonical(got) == _canonical(expected)
    assert tiny.reserved == 0
    assert os.listdir(spill._directory()) == []  # every partition file was removed at close
    spill.close()


def test_a_partition_still_too_big_is_split_again_and_one_hot_key_is_held(tmp_path, monkeypatch):
    monkeypatch.setattr(hash_join, "PARTITIONS", 2)  # few files per level: the partitions must split again
    left = _rows(200, 64) + [(999, n, np.ones((2, 2))) for n in range(3)]
    right = _rows(400, 64) + [(999, n, np.ones((2, 2))) for n in range(120)]  # one key no hash splits
    spill = SpillDirectory(str(tmp_path / "spill"))
    expected, _ = _join("FULL", left, right, unlimited(), spill)
    got, grace = _join("FULL", left, right, MemoryManager(8 << 10), spill)
    assert _canonical(got) == _canonical(expected)
    assert grace.metrics.spilled_bytes > 2 * sum(8 * 3 + 32 for _ in right)  # written more than once: it recursed
    spill.close()


# ------------------------------------------------------------ through SQL

QUERIES = [
    "SELECT A.i, A.j, A.v + B.v AS v FROM A JOIN B ON A.i = B.j AND A.j = B.i",
    "SELECT A.i, A.j, A.v - B.v AS v FROM A LEFT JOIN B ON A.i = B.i AND A.j = B.j",
    "SELECT COALESCE(A.i, B.i) AS i, COALESCE(A.j, B.j) AS j, A.v + B.v AS v FROM A FULL JOIN B "
    "ON A.i = B.i AND A.j = B.j",
    "SELECT A.i, A.j, B.j AS k, A.v * B.v AS v FROM A JOIN B ON A.i = B.i AND A.j < B.j",  # a residual
]


@pytest.fixture(params=["dense", "csr"])
def tensors(request, cur):
    """A and B of about 32 KB each (more than a 64KB memory_limit leaves to a join), B missing a row of tiles."""
    sparse = request.param == "csr"
    size, tile = (128, 8) if sparse else (64, 4)
    A, B = RNG.standard_normal((size, size)), RNG.standard_normal((size, size))
    if sparse:  # mostly zeros, given as scipy.sparse: stored as CSR tiles
        A[abs(A) < 1.5], B[abs(B) < 1.5] = 0, 0
    source = scipy.sparse.csr_array if sparse else np.asarray
    cur.execute(f"CREATE TENSOR A FROM ? TILE ({tile}, {tile})", [source(A)])
    cur.execute(f"CREATE TENSOR B FROM ? TILE ({tile}, {tile})", [source(B)])
    cur.execute("DELETE FROM B WHERE B.i = 2")  # the outer joins have unmatched tuples
    return cur


def _answer(cur, query: str) -> list:
    return _canonical([tuple(v.tolist() if isinstance(v, np.integer) else v for v in row)
                       for row in cur.execute(query).fetchall()])


@pytest.mark.parametrize("workers", [1, 2])
def test_joins_under_a_tiny_memory_limit_match_those_without(tensors, tmp_path, workers):
    cur = tensors
    cur.execute(f"SET workers = {workers}")
    expected = [_answer(cur, q) for q in QUERIES]
    cur.execute("SET memory_limit = '64KB'")
    cur.execute(f"SET temp_directory = '{tmp_path / 'spill'}'")
    for query, answer in zip(QUERIES, expected):
        assert _answer(cur, query) == answer, query
        assert not [f for f in spill_files(tmp_path / "spill") if "join-" in f]  # the result's may stay
    cur.execute("SELECT 1 AS x")  # a new result: the last one's spill goes
    assert spill_files(tmp_path / "spill") == []


def test_explain_analyze_shows_what_the_join_spilled(tensors, tmp_path):
    cur = tensors
    cur.execute("SET memory_limit = '64KB'")
    cur.execute(f"SET temp_directory = '{tmp_path / 'spill'}'")
    lines = [row[0] for row in cur.execute("EXPLAIN ANALYZE " + QUERIES[0]).fetchall()]
    join = next(line for line in lines if "HashJoinExec" in line)
    assert "spilled=" in join.split("actual")[1]


def test_a_failed_join_leaves_no_spill_file(tensors, tmp_path, monkeypatch):
    cur = tensors
    cur.execute("SET memory_limit = '64KB'")
    cur.execute(f"SET temp_directory = '{tmp_path / 'spill'}'")
    original = HashJoinExec._join_partitions

    def failing(self, *args):
        yield from original(self, *args)
        raise RuntimeError("a kernel failed")
    monkeypatch.setattr(HashJoinExec, "_join_partitions", failing)
    with pytest.raises(trdb.Error):
        cur.execute(QUERIES[0])
    assert spill_files(tmp_path / "spill") == []
