"""EINSUM of small dense stored tensors as one call on whole arrays (DenseEinsumExec), against numpy.

When it is chosen (every tile present, two or more operands, within dense_einsum_bytes and an
eighth of memory_limit, not under GRAD or MINIMIZE, the local executor) and when not; the arrays it
keeps follow writes, transactions and other connections; its result is the caller's array.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import trdb
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.whole_tensor import whole_array

RNG = np.random.default_rng(11)
CHAIN = "SELECT * FROM EINSUM('ij,jk,kl->il', A, B, C)"


def load(cur, name, array, tile, dtype="float64"):
    cur.execute(f"CREATE OR REPLACE TENSOR {name} FROM ? TILE ({', '.join(map(str, tile))}) DTYPE {dtype}", [array])


def plan_text(cur, query) -> str:
    return "\n".join(r[0] for r in cur.execute(f"EXPLAIN {query}").fetchall())


@pytest.fixture
def chain(cur):
    arrays = [RNG.standard_normal(s) for s in [(40, 6), (6, 40), (40, 6)]]
    for name, array, tile in zip("ABC", arrays, [(16, 6), (6, 16), (16, 6)]):  # ragged edge tiles
        load(cur, name, array, tile)
    return arrays


def test_a_chain_of_dense_operands_is_one_call_on_whole_arrays(cur, chain):
    A, B, C = chain
    text = plan_text(cur, CHAIN)
    assert "DenseEinsumExec(EINSUM('ij,jk,kl->il', A, B, C) on whole arrays, tile [16, 6])" in text
    assert "HashJoinExec" not in text and "TensorScanExec" not in text
    cur.execute(CHAIN)
    rows = cur.fetchall()
    assert sorted(r[:2] for r in rows) == [(0, 0), (1, 0), (2, 0)]  # the bound tiling: 16-row tiles, ragged edge
    assert [r[2].shape for r in sorted(rows, key=lambda r: r[0])] == [(16, 6), (16, 6), (8, 6)]
    np.testing.assert_allclose(cur.execute(CHAIN).fetch_tensor(), A @ B @ C, rtol=1e-12, atol=1e-12)


def test_explain_analyze_counts_the_kernels_flops(cur, chain):
    text = plan_text(cur, "ANALYZE " + CHAIN)
    flops = 2 * 6 * 40 * 6 + 2 * 40 * 6 * 6  # (B @ C) then A @ (B C), as opt_einsum orders it
    assert f"Executed work: flops={flops / 1e3:.1f}K ({flops})" in text, text


def test_absent_tiles_keep_the_decomposition_that_skips_them(cur):
    A = RNG.standard_normal((8, 8))
    A[:4, 4:] = 0  # one of four tiles absent: no tile product is run for it
    B = RNG.standard_normal((8, 6))
    load(cur, "A", scipy.sparse.csr_matrix(A), (4, 4))  # sparse on purpose: a dense load keeps the zero tile
    load(cur, "B", B, (4, 3))
    assert cur.execute("SELECT COUNT(*) FROM A").fetchone()[0] == 3
    query = "SELECT * FROM EINSUM('ij,jk->ik', A, B)"
    text = plan_text(cur, query)
    assert "DenseEinsumExec" not in text and "HashJoinExec" in text
    np.testing.assert_allclose(cur.execute(query).fetch_tensor(), A @ B, atol=1e-12)


def test_one_tile_each_is_read_in_place_and_one_operand_stays_a_kernel_per_tile(con, cur):
    A, B = RNG.standard_normal((5, 4)), RNG.standard_normal((4, 3))
    load(cur, "A", A, (5, 4))
    load(cur, "B", B, (4, 3))
    query = "SELECT * FROM EINSUM('ij,jk->ik', A, B)"
    assert "DenseEinsumExec" in plan_text(cur, query)
    pool = con._session().catalog.pool
    np.testing.assert_allclose(cur.execute(query).fetch_tensor(), A @ B, atol=1e-12)
    kept = pool.bytes
    np.testing.assert_allclose(cur.execute(query).fetch_tensor(), A @ B, atol=1e-12)
    assert pool.bytes == kept == 8 * (20 + 12) + 2 * 8 * 2  # the tiles and their keys: no second copy
    load(cur, "A", A, (2, 2))
    assert "DenseEinsumExec" not in plan_text(cur, "SELECT * FROM EINSUM('ij->ji', A)")
    np.testing.assert_allclose(cur.execute("SELECT * FROM EINSUM('ij->ji', A)").fetch_tensor(), A.T)


def test_the_setting_and_the_memory_limit_bound_it(cur, chain):
    assert "DenseEinsumExec" in plan_text(cur, CHAIN)
    held = 8 * (3 * 240 + 240 + 240)  # operands, the largest intermediate (opt_einsum counts the result), result
    cur.execute(f"SET dense_einsum_bytes = {held - 1}")
    assert "DenseEinsumExec" not in plan_text(cur, CHAIN)
    cur.execute(f"SET dense_einsum_bytes = {held}")
    assert "DenseEinsumExec" in plan_text(cur, CHAIN)
    with pytest.raises(trdb.ProgrammingError, match="dense_einsum_bytes"):
        cur.execute("SET dense_einsum_bytes = 'lots'")


def test_a_small_memory_limit_keeps_tiles(tmp_path):
    con = trdb.connect(str(tmp_path / "small.trdb"), memory_limit="16MB")
    cur = con.cursor()
    arrays = [RNG.standard_normal(s) for s in [(512, 256), (256, 512)]]  # 2 MB in all: more than 16 MB / 8
    load(cur, "A", arrays[0], (128, 256))
    load(cur, "B", arrays[1], (256, 128))
    query = "SELECT * FROM EINSUM('ij,jk->ik', A, B)"
    assert "DenseEinsumExec" not in plan_text(cur, query)
    np.testing.assert_allclose(cur.execute(query).fetch_tensor(), arrays[0] @ arrays[1], rtol=1e-10, atol=1e-10)
    cur.execute("SET memory_limit = '1GB'")
    assert "DenseEinsumExec" in plan_text(cur, query)
    con.close()


def test_a_write_is_seen_by_the_next_statement(cur, chain):
    A, B, C = chain
    np.testing.assert_allclose(cur.execute(CHAIN).fetch_tensor(), A @ B @ C, atol=1e-12)
    cur.execute("UPDATE B SET v = v * 2")
    np.testing.assert_allclose(cur.execute(CHAIN).fetch_tensor(), A @ (2 * B) @ C, atol=1e-12)
    A2 = RNG.standard_normal(A.shape)
    load(cur, "A", A2, (16, 6))
    np.testing.assert_allclose(cur.execute(CHAIN).fetch_tensor(), A2 @ (2 * B) @ C, atol=1e-12)


def test_after_a_write_the_operands_are_put_together_on_the_workers_threads(cur, chain, monkeypatch):
    """At workers = 2 the first two operands' whole arrays are built at once on two threads (each waits
    for the other here: one after the other, this times out), the third by whichever is free; once they
    are kept, each is taken on this thread and none is built."""
    import threading

    from trdb.catalog.catalog import Catalog

    A, B, C = chain
    cur.execute("SET workers = 2")
    cur.execute("UPDATE A SET v = v * 2")
    met, built, looked_up, threads = threading.Barrier(2, timeout=30), [], [], set()
    whole, kept = Catalog.whole_array, Catalog.kept_whole_array

    def meeting(self, meta):
        built.append(meta.name)
        if len(built) <= 2:
            met.wait()
        threads.add(threading.get_ident())
        return whole(self, meta)

    def looking_up(self, meta):
        looked_up.append(meta.name)
        threading.Event().wait(0.05)  # time for a thread started beside this one to take the next operand
        threads.add(threading.get_ident())
        return kept(self, meta)
    monkeypatch.setattr(Catalog, "whole_array", meeting)
    np.testing.assert_allclose(cur.execute(CHAIN).fetch_tensor(), (2 * A) @ B @ C, atol=1e-12)
    assert sorted(built) == ["A", "B", "C"] and len(threads) == 2
    built.clear()
    threads.clear()
    monkeypatch.setattr(Catalog, "kept_whole_array", looking_up)
    np.testing.assert_allclose(cur.execute(CHAIN).fetch_tensor(), (2 * A) @ B @ C, atol=1e-12)
    assert sorted(looked_up) == ["A", "B", "C"] and built == [] and threads == {threading.get_ident()}


def test_transactions_and_other_connections_see_their_own_versions(tmp_path):
    path = str(tmp_path / "db.trdb")
    writer, reader = trdb.connect(path), trdb.connect(path)
    w, r = writer.cursor(), reader.cursor()
    A, B = RNG.standard_normal((8, 4)), RNG.standard_normal((4, 8))
    load(w, "A", A, (4, 4))
    load(w, "B", B, (4, 4))
    query = "SELECT * FROM EINSUM('ij,jk->ik', A, B)"
    np.testing.assert_allclose(r.execute(query).fetch_tensor(), A @ B, atol=1e-12)
    w.execute("BEGIN")
    w.execute("UPDATE A SET v = v + 1")
    np.testing.assert_allclose(w.execute(query).fetch_tensor(), (A + 1) @ B, atol=1e-12)  # its own write
    np.testing.assert_allclose(r.execute(query).fetch_tensor(), A @ B, atol=1e-12)  # not yet committed
    w.execute("ROLLBACK")
    np.testing.assert_allclose(w.execute(query).fetch_tensor(), A @ B, atol=1e-12)
    w.execute("UPDATE A SET v = v * 3")
    np.testing.assert_allclose(r.execute(query).fetch_tensor(), (3 * A) @ B, atol=1e-12)
    writer.close()
    reader.close()


def test_the_fetched_result_is_the_callers_to_change(cur, chain):
    A, B, C = chain
    first = cur.execute(CHAIN).fetch_tensor()
    assert first.flags.writeable
    first[...] = 0
    np.testing.assert_allclose(cur.execute(CHAIN).fetch_tensor(), A @ B @ C, atol=1e-12)
    tiles = [r[-1] for r in cur.execute(CHAIN).fetchall()]
    tiles[0][...] = 0  # a tile handed out is the caller's too: the kept operands are not touched
    np.testing.assert_allclose(cur.execute(CHAIN).fetch_tensor(), A @ B @ C, atol=1e-12)


def test_float32_and_mixed_precision(cur):
    A, B = RNG.standard_normal((20, 8)).astype(np.float32), RNG.standard_normal((8, 20)).astype(np.float32)
    load(cur, "A", A, (10, 8), "float32")
    load(cur, "B", B, (8, 10), "float32")
    query = "SELECT * FROM EINSUM('ij,jk->ik', A, B)"
    assert "DenseEinsumExec" in plan_text(cur, query)
    got = cur.execute(query).fetch_tensor()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, A @ B, rtol=1e-5, atol=1e-5)
    load(cur, "B", B.astype(np.float64), (8, 10))
    got = cur.execute(query).fetch_tensor()
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, A.astype(np.float64) @ B, rtol=1e-6, atol=1e-6)


def test_inside_a_larger_query(cur, chain):
    A, B, C = chain
    cur.execute("SELECT E.i, SUM(E.v * 2) AS v FROM EINSUM('ij,jk,kl->il', A, B, C) AS E GROUP BY E.i")
    got = {r[0]: r[1] for r in cur.fetchall()}
    expected = 2 * (A @ B @ C)
    for i, tile in got.items():
        np.testing.assert_allclose(tile, expected[16 * i:16 * (i + 1)], atol=1e-12)
    cur.execute("CREATE TENSOR D AS SELECT * FROM EINSUM('ij,jk,kl->il', A, B, C)")
    np.testing.assert_allclose(cur.execute("SELECT * FROM D").fetch_tensor(), A @ B @ C, atol=1e-12)


def test_beside_tile_products_every_einsum_is_decomposed(cur, chain):
    A, B, C = chain
    load(cur, "D", RNG.standard_normal((6, 40)), (6, 16))
    load(cur, "G", RNG.standard_normal((6, 6)), (6, 6))
    both = ("SELECT E.i, D.j, SUM(MATMUL(E.v, D.v)) AS v FROM EINSUM('ij,jk,kl->il', A, B, C) AS E "
            "JOIN D ON E.l = D.i GROUP BY E.i, D.j")  # a tile product after the EINSUM: BLAS's threads would spin
    assert "DenseEinsumExec" not in plan_text(cur, both) and "HashJoinExec" in plan_text(cur, both)
    np.testing.assert_allclose(cur.execute(both).fetch_tensor(), A @ B @ C @ cur.execute("SELECT * FROM D")
                               .fetch_tensor(), atol=1e-10)
    two = ("SELECT E.i, F.k, SUM(E.v * 2) AS v FROM EINSUM('ij,jk,kl->il', A, B, C) AS E "
           "JOIN EINSUM('ij,jk->ik', C, G) AS F ON E.i = F.i GROUP BY E.i, F.k")  # two whole EINSUMs: no tiles
    assert plan_text(cur, two).count("DenseEinsumExec") == 2


def test_a_gradient_through_an_einsum_keeps_the_decomposition(cur):
    X, W = RNG.standard_normal((12, 6)), RNG.standard_normal((6, 4))
    load(cur, "X", X, (4, 6))
    load(cur, "W", W, (6, 2))
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(E.v)) AS v FROM EINSUM('ij,jk->ik', X, W) AS E")
    text = plan_text(cur, "SELECT * FROM GRAD(loss, W)")
    assert "DenseEinsumExec" not in text
    got = cur.execute("SELECT * FROM GRAD(loss, W)").fetch_tensor()
    np.testing.assert_allclose(got, 2 * X.T @ (X @ W), rtol=1e-10, atol=1e-10)  # d sum((XW)^2) / dW


def test_the_ray_executor_keeps_tiles(cur, chain):
    pytest.importorskip("ray")
    cur.execute("SET executor = 'ray'")
    try:
        assert "DenseEinsumExec" not in plan_text(cur, CHAIN)
    finally:
        cur.execute("SET executor = 'local'")


def test_row_tiles_in_one_buffer_are_the_whole_array_without_a_copy():
    """A parameter a MINIMIZE step wrote lies in one buffer, its row tiles back to back: the whole array is
    a read-only view of it; tiles anywhere else, or keyed out of order, are copied into place."""
    meta = TensorMeta("W", ("i", "j"), "v", np.dtype("float32"), (6, 4), (2, 4), "t")
    buffer = RNG.standard_normal((3, 2, 4)).astype(np.float32)
    keys = np.array([[0, 0], [1, 0], [2, 0]])
    whole = whole_array(meta, keys, list(buffer))
    assert np.shares_memory(whole, buffer) and not whole.flags.writeable
    np.testing.assert_array_equal(whole, buffer.reshape(6, 4))
    apart = [tile.copy() for tile in buffer]
    copied = whole_array(meta, keys, apart)
    assert not np.shares_memory(copied, buffer) and not copied.flags.writeable
    np.testing.assert_array_equal(copied, buffer.reshape(6, 4))
    swapped = whole_array(meta, keys[[1, 0, 2]], list(buffer))
    np.testing.assert_array_equal(swapped, buffer[[1, 0, 2]].reshape(6, 4))
    columns = TensorMeta("W", ("i", "j"), "v", np.dtype("float32"), (2, 12), (2, 4), "t")
    np.testing.assert_array_equal(whole_array(columns, np.array([[0, 0], [0, 1], [0, 2]]), list(buffer)),
                                  np.concatenate(list(buffer), axis=1))


def test_a_product_after_minimize_steps_reads_the_parameter_they_wrote(cur):
    """MINIMIZE's new tiles of W are read whole by the next step's product (a view of the buffer the step
    wrote them from) and by a later EINSUM: both see the values stored."""
    X, W = RNG.standard_normal((64, 8)).astype(np.float32), RNG.standard_normal((8, 4)).astype(np.float32)
    load(cur, "X", X, (16, 2), "float32")
    load(cur, "W", W, (2, 4), "float32")
    cur.execute("SET workers = 2")
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(p.v)) AS v FROM (SELECT X.i, W.j, SUM(MATMUL(X.v, W.v)) AS v "
                "FROM X JOIN W ON X.j = W.i GROUP BY X.i, W.j) AS p")
    assert "DenseEinsumExec(EINSUM('ij,jk->ik', X, W) on whole arrays in" in plan_text(cur, "SELECT * FROM GRAD(loss, W)")
    for _ in range(3):
        before = cur.execute("SELECT * FROM W").fetch_tensor().astype(np.float64)
        cur.execute("MINIMIZE loss WRT (W) WITH (optimizer = 'sgd', learning_rate = 1e-3, steps = 1)")
        gradient = 2 * X.astype(np.float64).T @ (X.astype(np.float64) @ before)
        np.testing.assert_allclose(cur.execute("SELECT * FROM W").fetch_tensor(), before - 1e-3 * gradient,
                                   rtol=1e-4, atol=1e-4)
    stored = cur.execute("SELECT * FROM W").fetch_tensor()
    np.testing.assert_allclose(cur.execute("SELECT * FROM EINSUM('ij,jk->ik', X, W)").fetch_tensor(), X @ stored,
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("runs", [False, True], ids=["list", "runs"])
@pytest.mark.parametrize("drop, repeat", [(None, None), (4, None), (4, 0), (0, None)])
def test_a_whole_array_from_tiles_holds_zeros_only_where_a_tile_is_absent(drop, repeat, runs, monkeypatch):
    """Ragged edge tiles and a CSR tile put in place; an absent tile's region is zeros, whether it is missing
    outright or its place in the count is taken by a repeated key (then the array starts from zeros too). Read
    in runs of stacks, the runs of whole tiles are placed at once, the same array."""
    import scipy.sparse as sp

    from trdb.storage import tile_runs
    from trdb.storage.whole_tensor import _covers

    meta = TensorMeta("W", ("i", "j"), "v", np.dtype("float64"), (5, 7), (2, 3), "t")
    expected = RNG.standard_normal((5, 7))
    expected[expected < 0] = 0
    keys = [(i, j) for i in range(3) for j in range(3)]
    tiles = [expected[2 * i:2 * i + 2, 3 * j:3 * j + 3].copy() for i, j in keys]
    tiles[1] = sp.csr_matrix(tiles[1])
    if drop is not None:
        i, j = keys[drop]
        expected[2 * i:2 * i + 2, 3 * j:3 * j + 3] = 0
        if repeat is None:
            del keys[drop], tiles[drop]
        else:
            keys[drop], tiles[drop] = keys[repeat], tiles[repeat]
    regions = [(slice(2 * i, min(2 * i + 2, 5)), slice(3 * j, min(3 * j + 3, 7))) for i, j in keys]
    assert _covers(meta, regions) == (drop is None)
    if runs:
        monkeypatch.setattr(tile_runs, "MIN_RUN", 1)
        tiles = tile_runs.as_tile_runs(tiles)
        assert tiles.runs
    whole = whole_array(meta, np.array(keys), tiles)
    np.testing.assert_array_equal(whole, expected)
    assert not whole.flags.writeable


def test_a_short_edge_region_is_not_taken_for_a_whole_tile():
    from trdb.storage.whole_tensor import _covers

    meta = TensorMeta("W", ("i",), "v", np.dtype("float64"), (5,), (2,), "t")
    assert _covers(meta, [(slice(0, 2),), (slice(2, 4),), (slice(4, 5),)])
    assert not _covers(meta, [(slice(0, 2),), (slice(2, 3),), (slice(4, 5),)])  # a tile of 1 where 2 belong
    assert not _covers(meta, [(slice(0, 2),), (slice(2, 4),), (slice(6, 7),)])  # a key past the end
    assert not _covers(meta, [])


@pytest.mark.parametrize("rows, tile_rows", [(4096 * 3, 1), (1003, 16)])
def test_a_result_of_small_tiles_is_handed_on_as_stacks(cur, rows, tile_rows, monkeypatch):
    """Row-wise dot products of rows of 8: the result's small tiles go on as column batches cut from the result
    array (and an edge tile where the rows do not fill the last), as the aggregate and the writer take them."""
    from trdb.execution.operators import dense_einsum
    made = []
    cut = dense_einsum.cut_tiles
    monkeypatch.setattr(dense_einsum, "cut_tiles", lambda *a: made.append(1) or cut(*a))
    a, b = RNG.standard_normal((rows, 8)), RNG.standard_normal((rows, 8))
    load(cur, "A", a, (tile_rows, 8))
    load(cur, "B", b, (tile_rows, 8))
    dots = np.einsum("ij,ij->i", a, b)
    total = cur.execute("SELECT SUM(SUMSQ(X.v)) AS s FROM EINSUM('ij,ij->i', A, B) AS X").fetchone()[0]
    np.testing.assert_allclose(float(total), (dots ** 2).sum(), rtol=1e-10)
    cur.execute("CREATE TENSOR D AS SELECT * FROM EINSUM('ij,ij->i', A, B)")
    np.testing.assert_allclose(cur.execute("SELECT * FROM D").fetch_tensor(), dots, rtol=1e-12)
    assert made
