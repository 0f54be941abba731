"""Scans of tensors larger than the buffer pool keeps: bounded reads, each partition its own tiles, the same checks."""
from __future__ import annotations

import itertools
from collections import Counter

import duckdb
import numpy as np
import pytest

import trdb
from helpers.device_standin import DeviceStandIn
from trdb.execution.exchange.partitioning import partition_of
from trdb.execution.operators.operator import ExecContext, drain
from trdb.execution.operators.tensor_scan import TensorScanExec
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.storage import tile_store
from trdb.storage.key_hash import key_hash, key_hash_sql

SMALL = "SET memory_limit = '64KB'"   # trdb's budget 32 KB: the pool keeps at most 16 KB, a read is 4 KB


@pytest.fixture
def path(tmp_path):
    path = str(tmp_path / "stream.trdb")
    with trdb.connect(path) as con:
        con.execute("CREATE TENSOR A (i, j) SHAPE (100, 72) TILE (16, 16) FILL RANDOM_NORMAL(0, 1, 7)")  # 28 KB
    return path


@pytest.fixture
def reads(monkeypatch):
    """The row counts of every bounded read of tile rows."""
    counts, original = [], tile_store.read_tile_rows

    def counted(*args, **kwargs):
        keys, tiles = original(*args, **kwargs)
        counts.append(len(keys))
        return keys, tiles
    monkeypatch.setattr(tile_store, "read_tile_rows", counted)
    return counts


def oracle(path) -> np.ndarray:
    with trdb.connect(path) as con:
        return con.execute("SELECT * FROM A").fetch_tensor()


@pytest.mark.on_cpu  # of host memory_limit
def test_a_tensor_past_the_budget_is_read_in_several_bounded_reads(path, reads):
    expected = oracle(path)
    assert reads == []  # read whole through the pool while the budget allows
    with trdb.connect(path) as con:
        con.execute(SMALL)
        con.execute("SET workers = 1")
        np.testing.assert_array_equal(con.execute("SELECT * FROM A").fetch_tensor(), expected)
        assert len(reads) >= 7 and sum(reads) == 7 * 5 and max(reads) <= 7  # 4 KB reads of 1 KB tiles (edge tiles less)
        total = con.execute("SELECT SUM(SUMSQ(A.v)) AS s FROM A").fetchall()[0][0]
        assert float(total) == pytest.approx(float((expected.astype(np.float64) ** 2).sum()), rel=1e-5)
        plan = "\n".join(r[0] for r in con.execute("EXPLAIN ANALYZE SELECT SUM(SUMSQ(A.v)) AS s FROM A").fetchall())
        scan = next(line for line in plan.splitlines() if "TensorScanExec" in line)
        memory = scan.split("memory=")[1].split("B")[0]
        assert memory.endswith("K") and 4 <= float(memory[:-1]) < 6  # one read and the index, not 28 KB of tiles
        assert con._live.catalog.pool.bytes == 0  # never cached whole


def test_a_statement_on_a_gpu_reads_within_memory_limit_too(path, reads, monkeypatch):
    """Reads are decoded in host memory before their tiles move to the device: sized by memory_limit, not by the
    GPU's budget (which let one read take the whole tensor)."""
    expected = oracle(path)
    monkeypatch.setattr("trdb.session.session.backend_for", lambda device: DeviceStandIn())
    with trdb.connect(path) as con:
        con.execute(SMALL)
        con.execute("SET workers = 1")
        np.testing.assert_array_equal(con.execute("SELECT * FROM A").fetch_tensor(), expected)
        assert con._session().db.file.device_memory is not None  # the statement ran with the device's budget
        assert len(reads) >= 7 and max(reads) <= 7


def test_streamed_results_match_numpy_through_joins_and_filters(path):
    a = oracle(path)
    with trdb.connect(path) as con:
        con.execute(SMALL)
        con.execute("SET workers = 2")
        got = con.execute("SELECT A.i, A.j, A.v * 2 AS v FROM A WHERE A.j < 2").fetch_tensor()
        np.testing.assert_allclose(got[:, :32], a[:, :32] * 2)
        doubled = con.execute("SELECT A.i, A.j, A.v + B.v AS v FROM A JOIN A AS B ON A.i = B.i AND A.j = B.j")
        np.testing.assert_allclose(doubled.fetch_tensor(), a * 2)


def scan_keys(con, partition: int, partitions: int, columns: tuple[int, ...]) -> list[tuple]:
    catalog = con._live.catalog
    scan = TensorScanExec(catalog.tensor("A"), partition, partitions, columns)
    scan.open(ExecContext(NUMPY_BACKEND, catalog, memory=catalog.db.file.memory))
    try:
        return [row[:2] for row in drain(scan)]
    finally:
        scan.close()


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("columns", [(0, 1), (1,)])
@pytest.mark.parametrize("streamed", [False, True])
def test_partitions_read_disjoint_tiles_whose_union_is_the_tensor(path, reads, workers, columns, streamed):
    with trdb.connect(path) as con:
        if streamed:
            con.execute(SMALL)
        parts = [scan_keys(con, p, workers, columns) for p in range(workers)]
    every = list(itertools.chain(*parts))
    assert sorted(every) == sorted(itertools.product(range(7), range(5)))  # disjoint, and all of them
    for p, keys in enumerate(parts):
        assert keys and all(partition_of(tuple(k[c] for c in columns), workers) == p for k in keys)
    assert sum(reads) == (35 if streamed else 0)  # each partition read only its own tiles


def tamper(path, sql: str) -> None:
    con = duckdb.connect(path)
    table = con.execute("SELECT tile_table FROM _trdb.tensors WHERE name = 'A'").fetchone()[0]
    con.execute(sql.format(t=table))
    con.close()


@pytest.mark.parametrize("sql, message", [
    ("INSERT INTO {t} SELECT * FROM {t} WHERE k0 = 3 AND k1 = 2", r"more than one tile at key \(3, 2\)"),
    ("UPDATE {t} SET k0 = 9 WHERE k0 = 2 AND k1 = 1", r"tile at key \(9, 1\), outside its tile grid"),
    ("UPDATE {t} SET k1 = -1 WHERE k0 = 0 AND k1 = 0", r"tile at key \(0, -1\), outside its tile grid"),
])
@pytest.mark.parametrize("workers", [1, 3])
def test_a_tampered_table_is_a_data_error_on_the_streamed_path(path, reads, sql, message, workers):
    tamper(path, sql)
    with trdb.connect(path) as con:
        con.execute(SMALL)
        con.execute(f"SET workers = {workers}")
        with pytest.raises(trdb.DataError, match=message):
            con.execute("SELECT SUM(SUMSQ(A.v)) AS s FROM A").fetchall()
    assert workers > 1 or reads == []  # found from the index, before any tile was read (other workers may read theirs)


def test_a_streamed_read_that_meets_another_commit_runs_again(path, monkeypatch):
    with trdb.connect(path) as writer, trdb.connect(path) as reader:
        reader.execute(SMALL)
        before = reader.execute("SELECT * FROM A").fetch_tensor()
        original, commits = tile_store.read_tile_rows, []

        def read_tile_rows(*args, **kwargs):
            if not commits:  # another connection commits between two reads of one scan
                commits.append(1)  # first: the writer's own scan reads through here too
                writer.execute("UPDATE A SET v = A.v + 1")
            return original(*args, **kwargs)
        monkeypatch.setattr(tile_store, "read_tile_rows", read_tile_rows)
        after = reader.execute("SELECT * FROM A").fetch_tensor()
    np.testing.assert_allclose(after, before + 1)  # all of the new state, none of the old
    assert commits == [1]


def test_the_key_hash_is_the_same_in_python_and_in_sql():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (k0 BIGINT, k1 BIGINT, k2 BIGINT)")
    big, small = 2 ** 63 - 1, -2 ** 63
    rows = [(0, 0, 0), (5, 7, 1), (-3, 2, 9), (big, small, 5), (123456789012, 3, -4), (2 ** 31 - 2, 2 ** 31, 7)]
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    for columns in (["k0"], ["k0", "k1"], ["k0", "k1", "k2"], ["k2", "k0"]):
        got = con.execute(f"SELECT k0, k1, k2, {key_hash_sql(columns)} FROM t").fetchall()
        for row in got:
            assert key_hash(tuple(row[int(c[1])] for c in columns)) == row[3]
    assert key_hash((None, 3)) == key_hash((0, 3))  # an outer join's missing key


@pytest.mark.parametrize("partitions", [2, 3, 4, 8])
@pytest.mark.parametrize("grid", [(8, 8), (16, 16), (12, 5), (4, 4, 4), (64,)])
def test_the_key_hash_spreads_tile_grids_evenly(grid, partitions):
    counts = Counter(partition_of(key, partitions) for key in itertools.product(*map(range, grid)))
    tiles = np.prod(grid)
    assert len(counts) == partitions and max(counts.values()) <= tiles / partitions * 1.15 + 1
    diagonal = Counter(partition_of((i, i), partitions) for i in range(64))  # a block-diagonal matrix
    assert max(diagonal.values()) <= 64 / partitions * 1.6 + 1


def test_rows_whose_row_ids_moved_are_read_again_by_key(monkeypatch):
    """DuckDB may give rows other row ids (a checkpoint compacts deleted rows): the read goes by key then."""
    import trdb
    from trdb.storage import tile_store
    con = trdb.connect(workers=1)
    data = np.random.default_rng(3).standard_normal((64, 64)).astype(np.float32)
    con.execute("CREATE TENSOR A FROM ? TILE (8, 8)", [data])
    con.execute("SET memory_limit = '64KB'")  # streamed
    original = tile_store.read_tile_rows

    def moved(db, meta, index, start, stop, where=None):
        keys, tiles = original(db, meta, index, start, stop, where)
        return keys[1:], tiles[1:]  # as if a row id pointed nowhere
    monkeypatch.setattr(tile_store, "read_tile_rows", moved)
    total = con.execute("SELECT SUM(SUMSQ(A.v)) FROM A").fetchone()[0]
    assert abs(float(total) - float(np.sum(data.astype(np.float64) ** 2))) < 1e-3
    con.close()


@pytest.mark.parametrize("max_runs", [tile_store.MAX_RUNS, 0], ids=["runs", "hash-filter"])
def test_a_partition_reads_its_own_row_id_runs_not_the_tiles_between_them(path, monkeypatch, max_runs):
    """DuckDB evaluates the key-hash filter after its scan, so a range of row ids with the filter reads every
    partition's tiles in it: a partition reads the runs of its own row ids instead (with many runs, the range)."""
    expected = oracle(path)
    filters, original = [], tile_store._rows_sql

    def recorded(meta, ranges, where=None):
        filters.append(where)
        return original(meta, ranges, where)
    monkeypatch.setattr(tile_store, "_rows_sql", recorded)
    monkeypatch.setattr(tile_store, "MAX_RUNS", max_runs)
    with trdb.connect(path, workers=2) as con:
        con.execute(SMALL)
        np.testing.assert_array_equal(con.execute("SELECT * FROM A").fetch_tensor(), expected)
    assert filters and all((f is None) == bool(max_runs) for f in filters), filters


def test_row_id_runs_split_at_gaps_and_parts():
    index = tile_store.TileIndex(np.array([0, 1, 2, 5, 7, 8, 0, 1]), np.zeros((8, 1), np.int64), np.zeros(8),
                                 np.zeros(8), np.array([0, 6, 8]), ("t", "t_p1"))
    assert index.rowid_runs(0, 8) == [(0, 2, "t"), (5, 5, "t"), (7, 8, "t"), (0, 1, "t_p1")]
    assert index.rowid_runs(2, 7) == [(2, 2, "t"), (5, 5, "t"), (7, 8, "t"), (0, 0, "t_p1")]
