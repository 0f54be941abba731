"""EINSUM(...) and RETILE(...) in FROM against numpy.einsum: every form, ragged and mismatched tilings, 1-5 operands."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import trdb

RNG = np.random.default_rng(7)


def load(cur, name, array, tile):
    cur.execute(f"CREATE TENSOR {name} FROM ? TILE ({', '.join(map(str, tile))}) DTYPE float64", [array])


def einsum_query(cur, spec, names, shape):
    cur.execute(f"SELECT * FROM EINSUM('{spec}', {', '.join(names)})")
    return cur.fetch_tensor(shape=shape) if shape else np.asarray(cur.fetchall()[0][-1])


def check(cur, spec, arrays, tiles):
    names = [f"T{n}" for n in range(len(arrays))]
    for name, array, tile in zip(names, arrays, tiles):
        load(cur, name, array, tile)
    expected = np.einsum(spec, *arrays)
    got = einsum_query(cur, spec, names, expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
    return expected


# (spec, operand shapes, operand tiles): ragged tiles (not dividing the shapes) throughout
FORMS = [
    ("ij,jk->ik", [(7, 5), (5, 6)], [(3, 2), (2, 4)]),             # matmul, j tiled alike
    ("ij,jk->ik", [(7, 5), (5, 6)], [(3, 2), (3, 4)]),             # mismatched j tiles: retiled
    ("ij,jk->ki", [(7, 5), (5, 6)], [(7, 5), (1, 6)]),             # one tile against tiny tiles
    ("ij,jk", [(7, 5), (5, 6)], [(3, 2), (2, 4)]),                 # implicit output
    ("bij,bjk->bik", [(3, 4, 5), (3, 5, 2)], [(2, 3, 2), (1, 2, 2)]),  # batch axis
    ("i,j->ij", [(5,), (4,)], [(2,), (3,)]),                       # outer product
    ("ij,kl->ijkl", [(3, 2), (2, 3)], [(2, 1), (1, 2)]),           # outer product of matrices
    ("ij->i", [(7, 5)], [(3, 2)]),                                 # reductions
    ("ij->j", [(7, 5)], [(3, 2)]),
    ("ij->", [(7, 5)], [(3, 2)]),
    ("ijk->ik", [(4, 5, 3)], [(3, 2, 2)]),
    ("ij,ij->ij", [(7, 5), (7, 5)], [(3, 2), (2, 3)]),             # elementwise, different tilings
    ("ij,ij->", [(7, 5), (7, 5)], [(3, 2), (3, 2)]),               # inner product
    ("ij,ji->ij", [(7, 5), (5, 7)], [(3, 2), (2, 3)]),
    ("ij->ji", [(7, 5)], [(3, 2)]),                                # transposes
    ("ba", [(7, 5)], [(3, 2)]),                                    # implicit: a transpose
    ("ijk->kij", [(4, 5, 3)], [(3, 2, 2)]),
    ("ii->i", [(7, 7)], [(3, 3)]),                                 # diagonal
    ("ii->i", [(7, 7)], [(3, 2)]),                                 # diagonal of a non-square tiling
    ("ii->", [(7, 7)], [(3, 3)]),                                  # trace
    ("ii", [(7, 7)], [(7, 7)]),                                    # implicit trace, one tile
    ("iij->ij", [(5, 5, 3)], [(2, 2, 2)]),
    ("ii,i->i", [(5, 5), (5,)], [(2, 2), (3,)]),
    ("ij,jk,kl->il", [(7, 5), (5, 6), (6, 4)], [(3, 2), (2, 4), (4, 3)]),  # 3 operands
    ("ij,jk,ki->", [(4, 5), (5, 6), (6, 4)], [(3, 2), (2, 4), (4, 3)]),    # trace of a product
    ("ab,bc,cd,de->ae", [(5, 4), (4, 6), (6, 3), (3, 5)], [(2, 3), (3, 4), (4, 2), (2, 2)]),  # 4
    ("ab,bc,cd,de,ef->af", [(3, 4), (4, 5), (5, 2), (2, 6), (6, 3)],
     [(2, 3), (3, 2), (2, 2), (2, 4), (4, 2)]),                    # 5 operands
    ("ai,bi,ci,di,ei->abcde", [(2, 3), (3, 3), (2, 3), (2, 3), (3, 3)],
     [(1, 2), (2, 2), (2, 3), (1, 1), (3, 2)]),                    # 5 operands, one shared index
    ("nd,dh,nm,mf,fh->nm", [(6, 4), (4, 3), (6, 6), (6, 5), (5, 3)],
     [(4, 3), (3, 3), (4, 4), (4, 2), (2, 3)]),                    # graph attention
    ("ij,j->i", [(7, 5), (5,)], [(3, 2), (4,)]),                   # matrix-vector
    ("i,i->", [(9,), (9,)], [(4,), (5,)]),
    ("ijk,jl,lk->i", [(3, 4, 5), (4, 2), (2, 5)], [(2, 3, 2), (3, 1), (2, 3)]),
]


@pytest.mark.parametrize("plan", ["tiles", "whole arrays"])
@pytest.mark.parametrize("spec, shapes, tiles", FORMS, ids=[f[0] for f in FORMS])
def test_form_matches_numpy(cur, spec, shapes, tiles, plan):
    """Decomposed into joins and sums of tiles, and (operands of two or more tiles, all present) as one
    call on whole arrays (optimizer/whole_products.py)."""
    if plan == "tiles":
        cur.execute("SET dense_einsum_bytes = 0")
    check(cur, spec, [RNG.standard_normal(s) for s in shapes], tiles)
    names = ", ".join(f"T{n}" for n in range(len(shapes)))
    text = "\n".join(r[0] for r in cur.execute(f"EXPLAIN SELECT * FROM EINSUM('{spec}', {names})").fetchall())
    assert ("DenseEinsumExec" in text) == (plan == "whole arrays" and len(shapes) > 1), text


def test_result_keys_are_the_output_letters(cur):
    load(cur, "A", RNG.standard_normal((7, 5)), (3, 2))
    load(cur, "B", RNG.standard_normal((5, 6)), (2, 4))
    cur.execute("SELECT E.k, E.i, E.v FROM EINSUM('ij,jk->ki', A, B) AS E WHERE E.k = 1 ORDER BY E.i")
    assert [d[0] for d in cur.description] == ["k", "i", "v"]
    assert [row[:2] for row in cur.fetchall()] == [(1, 0), (1, 1), (1, 2)]
    cur.execute("SELECT * FROM EINSUM('ij,jk->ik', A, B)")
    assert [d[0] for d in cur.description] == ["i", "k", "v"]


def test_sparse_operands_skip_absent_tiles(cur):
    A = RNG.standard_normal((8, 8))
    A[:4, 4:] = 0
    A[4:, :4] = 0  # block diagonal: two of four tiles are absent
    B = RNG.standard_normal((8, 6))
    B[4:] = 0
    load(cur, "A", scipy.sparse.csr_matrix(A), (4, 4))  # sparse on purpose: a dense load keeps zero tiles
    load(cur, "B", scipy.sparse.csr_matrix(B), (4, 3))
    assert cur.execute("SELECT COUNT(*) FROM A").fetchone()[0] == 2
    assert cur.execute("SELECT COUNT(*) FROM B").fetchone()[0] == 2
    np.testing.assert_allclose(einsum_query(cur, "ij,jk->ik", ["A", "B"], (8, 6)), A @ B, atol=1e-12)
    np.testing.assert_allclose(einsum_query(cur, "ij,ij->ij", ["A", "A"], (8, 8)), A * A, atol=1e-12)
    np.testing.assert_allclose(einsum_query(cur, "ij,kj->ik", ["A", "A"], (8, 8)), A @ A.T, atol=1e-12)


def test_float32_operands(cur):
    A, B = RNG.standard_normal((6, 5)).astype(np.float32), RNG.standard_normal((5, 4)).astype(np.float32)
    cur.execute("CREATE TENSOR A FROM ? TILE (4, 2)", [A])
    cur.execute("CREATE TENSOR B FROM ? TILE (3, 3)", [B])
    cur.execute("SELECT * FROM EINSUM('ij,jk->ik', A, B)")
    got = cur.fetch_tensor()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, A @ B, rtol=1e-5, atol=1e-5)


def test_operands_are_from_items(cur):
    A, B, C = (RNG.standard_normal(s) for s in [(6, 5), (5, 4), (4, 3)])
    load(cur, "A", A, (4, 2)); load(cur, "B", B, (2, 3)); load(cur, "C", C, (3, 2))
    cur.execute("SELECT * FROM EINSUM('ik,kl->il', EINSUM('ij,jk->ik', A, B), C)")
    np.testing.assert_allclose(cur.fetch_tensor(), A @ B @ C, atol=1e-12)
    cur.execute("CREATE VIEW AB AS SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i "
                "GROUP BY A.i, B.j")
    cur.execute("SELECT * FROM EINSUM('ij,jk->ik', AB, RETILE(C, (4, 3)))")
    np.testing.assert_allclose(cur.fetch_tensor(), A @ B @ C, atol=1e-12)
    cur.execute("WITH T AS (SELECT A.j AS i, A.i AS j, TRANSPOSE(A.v) AS v FROM A) "
                "SELECT * FROM EINSUM('ij,jk->ik', T, A)")
    np.testing.assert_allclose(cur.fetch_tensor(), A.T @ A, atol=1e-12)
    cur.execute("CREATE TENSOR D AS SELECT * FROM EINSUM('ij,jk->ik', A, B)")
    cur.execute("SELECT * FROM D")
    np.testing.assert_allclose(cur.fetch_tensor(), A @ B, atol=1e-12)


def test_explain_shows_the_cheaper_order(cur):
    for name, shape, tile in [("A", (256, 4), (64, 4)), ("B", (4, 256), (4, 64)), ("C", (256, 4), (64, 4))]:
        load(cur, name, RNG.standard_normal(shape), tile)
    cur.execute("SET workers = 1")
    cur.execute("SET dense_einsum_bytes = 0")  # the decomposition's order, not one call on whole arrays
    lines = [r[0] for r in cur.execute("EXPLAIN SELECT * FROM EINSUM('ij,jk,kl->il', A, B, C)").fetchall()]
    text = "\n".join(lines)
    assert text.count("HashJoinExec") == 2 and "HashAggregateExec(group by [i, l]: SUM" not in text
    depth = {name: next(len(l) - len(l.lstrip()) for l in lines if f"TensorScanExec({name}" in l) for name in "ABC"}
    assert depth["B"] == depth["C"] > depth["A"]  # B and C contracted first: a 4x4 intermediate
    assert "HashAggregateExec(group by [j]: SUM(EINSUM('jk,kl->jl'" in text or \
        "HashAggregateExec(group by []: SUM(EINSUM('jk,kl->jl'" in text


def test_explain_shows_the_retile(cur):
    cur.execute("SET dense_einsum_bytes = 0")  # the decomposition's retile, not one call on whole arrays
    load(cur, "A", RNG.standard_normal((6, 5)), (4, 2))
    load(cur, "B", RNG.standard_normal((5, 4)), (3, 4))
    text = "\n".join(r[0] for r in cur.execute("EXPLAIN SELECT * FROM EINSUM('ij,jk->ik', A, B)").fetchall())
    # the result keeps the largest operand's tiling on i (4) and k (4): its type, bound before planning;
    # cheapest under that: B's two tiles re-cut to A's tiling on j; A keeps its tiling
    assert "RetileExec([3, 4] -> [2, 4])" in text and "HashJoinExec(INNER: j = j)" in text
    assert text.count("RetileExec") == 1


def _recut_keys(keys, old, new, shape=(7, 5)):
    """The keys of the tiles of shape `new` that overlap a present tile of shape `old`."""
    recut = set()
    for key in keys:
        lows = [k * t for k, t in zip(key, old)]
        highs = [min((k + 1) * t, n) - 1 for k, t, n in zip(key, old, shape)]
        ranges = [range(lo // t, hi // t + 1) for lo, hi, t in zip(lows, highs, new)]
        recut.update((a, b) for a in ranges[0] for b in ranges[1])
    return sorted(recut)


def test_retile_round_trips(cur):
    A = RNG.standard_normal((7, 5))
    A[:4, :2] = 0  # tile (0, 0) absent: sparse on purpose (a dense load keeps zero tiles)
    load(cur, "A", scipy.sparse.csr_matrix(A), (4, 2))
    stored = sorted((i, j) for i, j, _ in cur.execute("SELECT * FROM A").fetchall())
    assert (0, 0) not in stored and len(stored) == 5
    for tile in [(3, 3), (1, 5), (7, 5), (10, 10), (2, 1)]:
        cur.execute(f"SELECT * FROM RETILE(A, ({tile[0]}, {tile[1]}))")
        rows = cur.fetchall()
        assert all(v.shape == (min(tile[0], 7 - i * tile[0]), min(tile[1], 5 - j * tile[1])) for i, j, v in rows)
        np.testing.assert_array_equal(_assemble(rows, tile, (7, 5)), A)
        cur.execute(f"SELECT * FROM RETILE(RETILE(A, ({tile[0]}, {tile[1]})), (4, 2))")
        rows = cur.fetchall()
        # a re-cut tile is present where it takes a piece of a present tile (zeros are values), absent otherwise
        assert sorted(r[:2] for r in rows) == _recut_keys(_recut_keys(stored, (4, 2), tile), tile, (4, 2))
        if tile == (2, 1):  # a grid whose tiles fit inside the absent region: it stays absent
            assert sorted(r[:2] for r in rows) == stored
        np.testing.assert_array_equal(_assemble(rows, (4, 2), (7, 5)), A)
    cur.execute("SELECT R.i, R.j, R.v FROM RETILE(A, (3, 3)) AS R WHERE R.i = 2")
    assert [d[0] for d in cur.description] == ["i", "j", "v"] and {r[0] for r in cur.fetchall()} == {2}


def test_retile_adds_keys_for_unkeyed_axes(cur):
    A = RNG.standard_normal((6, 4))
    load(cur, "A", A, (2, 4))
    cur.execute("SELECT * FROM RETILE((SELECT A.i, A.v FROM A) AS X, (3, 3))")
    assert [d[0] for d in cur.description] == ["i", "j", "v"]
    np.testing.assert_array_equal(cur.fetch_tensor(), A)


def _assemble(rows, tile, shape):
    out = np.zeros(shape)
    for i, j, v in rows:
        out[i * tile[0]:i * tile[0] + v.shape[0], j * tile[1]:j * tile[1] + v.shape[1]] = v
    return out


def test_parallel_workers_agree(cur):
    arrays = [RNG.standard_normal(s) for s in [(9, 7), (7, 8), (8, 5)]]
    names = ["A", "B", "C"]
    for name, array, tile in zip(names, arrays, [(2, 3), (3, 2), (4, 4)]):
        load(cur, name, array, tile)
    expected = np.einsum("ij,jk,kl->il", *arrays)
    for workers in (1, 2, 4):
        cur.execute(f"SET workers = {workers}")
        np.testing.assert_allclose(einsum_query(cur, "ij,jk,kl->il", names, (9, 5)), expected, atol=1e-12)
        np.testing.assert_allclose(einsum_query(cur, "ij,kj->ik", ["A", "A"], (9, 9)), arrays[0] @ arrays[0].T,
                                   atol=1e-12)
        np.testing.assert_allclose(einsum_query(cur, "ij,jk->", ["A", "B"], ()), arrays[0].dot(arrays[1]).sum(),
                                   atol=1e-12)


@pytest.mark.parametrize("query, message", [
    ("SELECT * FROM EINSUM('ij,jk->ik', A)", "has 2 operand terms but 1 operands"),
    ("SELECT * FROM EINSUM('ijk,jk->ik', A, B)", "operand 1 term 'ijk' has 3 letters but the operand has 2 dimensions"),
    ("SELECT * FROM EINSUM('ij,ik->jk', A, B)", "letter 'i' is 6 in operand 1 and 5 in operand 2"),
    ("SELECT * FROM EINSUM('ij,jk->ik', A, Bee)", 'relation "Bee" does not exist'),
    ("SELECT * FROM EINSUM('ij,jk->iz', A, B)", "the output uses 'z' that no operand has"),
    ("SELECT * FROM EINSUM('ij,jk->ii', A, B)", "the output repeats 'i'"),
    ("SELECT * FROM EINSUM('i...,jk->ik', A, B)", "axes under '...' but the output has no '...'"),
    ("SELECT * FROM EINSUM('i1,jk->ik', A, B)", "unexpected character '1' in operand 1"),
    ("SELECT * FROM RETILE(A, (2, 2, 2))", "has rank 3"),
    ("SELECT * FROM RETILE(A, (0, 2))", "positive integers"),
    # a key dropped: A's tiles (4, 2) hold 2 of the 5 columns, which no key indexes (an InternalError before)
    ("WITH K AS (SELECT A.i, A.v FROM A) SELECT * FROM EINSUM('ij->i', K)",
     "its tiles (4, 2) hold 2 of the 5 elements along axis 2, which none of its 1 key columns indexes"),
])
def test_errors_point_at_the_einsum(cur, query, message):
    load(cur, "A", RNG.standard_normal((6, 5)), (4, 2))
    load(cur, "B", RNG.standard_normal((5, 4)), (3, 4))
    with pytest.raises(trdb.ProgrammingError) as info:
        cur.execute(query)
    text = str(info.value)
    assert message in text and "LINE 1:" in text and "^" in text


def test_an_operand_whose_unkeyed_axis_lies_whole_in_its_tiles_is_taken(cur):
    B = RNG.standard_normal((5, 4))
    load(cur, "B", B, (3, 4))  # one tile across: the key j can go
    result = cur.execute("WITH K AS (SELECT B.i, B.v FROM B) SELECT * FROM EINSUM('ij->i', K)").fetch_tensor()
    np.testing.assert_allclose(result, B.sum(axis=1), atol=1e-12)


def test_grad_through_einsum(cur):
    A, B = RNG.standard_normal((6, 4)), RNG.standard_normal((4, 5))
    load(cur, "A", A, (3, 2)); load(cur, "B", B, (2, 2))
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(E.v)) AS v FROM EINSUM('ij,jk->ik', A, B) AS E")
    cur.execute("SELECT * FROM GRAD(loss, A)")
    np.testing.assert_allclose(cur.fetch_tensor(shape=A.shape), 2 * (A @ B) @ B.T, atol=1e-10)
