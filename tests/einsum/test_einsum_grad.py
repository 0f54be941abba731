"""GRAD through EINSUM with an ellipsis and with a size-1 broadcast letter, against central differences."""
from __future__ import annotations

import numpy as np
import pytest

RNG = np.random.default_rng(23)
H = 1e-6


def load(cur, name, array, tile):
    cur.execute(f"CREATE TENSOR {name} FROM ? TILE ({', '.join(map(str, tile))}) DTYPE float64", [array])


def central_differences(loss, arrays, which):
    """d loss / d arrays[which], one element at a time: (loss(x + h) - loss(x - h)) / 2h."""
    x = arrays[which]
    grad = np.zeros_like(x)
    for index in np.ndindex(*x.shape):
        for sign in (1, -1):
            moved = [a.copy() for a in arrays]
            moved[which][index] += sign * H
            grad[index] += sign * loss(*moved) / (2 * H)
    return grad


# (spec, shapes, tiles): operands keep their tiling (GRAD through a re-cut is not supported)
FORMS = [
    ("...j,jk->...k", [(4, 3, 5), (5, 2)], [(2, 3, 5), (5, 2)]),    # '...' over a key axis and a tile axis
    ("i...,i...->...", [(4, 3), (4, 3)], [(2, 3), (2, 3)]),         # '...' summed into the output
    ("ij,ij->j", [(6, 3), (1, 3)], [(2, 3), (1, 3)]),               # a broadcast letter: a broadcast join
    ("ijk,jk->ik", [(4, 1, 3), (5, 3)], [(2, 1, 3), (5, 3)]),       # broadcast the other way
]


@pytest.mark.parametrize("spec, shapes, tiles", FORMS, ids=[f[0] for f in FORMS])
def test_grad_of_einsum_in_from_matches_central_differences(cur, spec, shapes, tiles):
    arrays = [RNG.standard_normal(s) for s in shapes]
    for name, array, tile in zip(("A", "B"), arrays, tiles):
        load(cur, name, array, tile)
    cur.execute(f"CREATE VIEW loss AS SELECT SUM(SUMSQ(E.v)) AS v FROM EINSUM('{spec}', A, B) AS E")

    def loss(*operands):
        return float(np.sum(np.einsum(spec, *operands) ** 2))
    for which, name in enumerate(("A", "B")):
        cur.execute(f"SELECT * FROM GRAD(loss, {name})")
        got = cur.fetch_tensor(shape=shapes[which])
        np.testing.assert_allclose(got, central_differences(loss, arrays, which), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("spec, shapes", [("...j,jk->...k", [(3, 5), (5, 2)]), ("ij,ij->j", [(6, 3), (1, 3)]),
                                          ("i...,...->i...", [(4, 3), ()])])
def test_grad_of_the_per_tuple_kernel_matches_central_differences(cur, spec, shapes):
    arrays = [RNG.standard_normal(s) for s in shapes]
    for name, array in zip(("A", "B"), arrays):
        load(cur, name, array, array.shape)
    cur.execute(f"CREATE VIEW loss AS SELECT SUM(SUMSQ(EINSUM('{spec}', A.v, B.v))) AS v FROM A, B")

    def loss(*operands):
        return float(np.sum(np.einsum(spec, *operands) ** 2))
    for which, name in enumerate(("A", "B")):
        cur.execute(f"SELECT * FROM GRAD(loss, {name})")
        got = cur.fetch_tensor(shape=shapes[which]) if shapes[which] else np.asarray(cur.fetchall()[0][-1])
        np.testing.assert_allclose(got, central_differences(loss, arrays, which), rtol=1e-5, atol=1e-6)
