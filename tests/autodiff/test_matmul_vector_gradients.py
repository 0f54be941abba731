"""GRAD of MATMUL between a batch of matrices and a vector, either way round, against finite differences."""
from __future__ import annotations

import numpy as np
from test_gradients import check, load, rand

A0, X0 = rand(4, 3, 5), rand(5)


def test_batch_times_vector(cur):
    load(cur, "A", A0, (2, 3, 5)); load(cur, "x", X0, (5,))
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(MATMUL(A.v, x.v))) AS v FROM A, x")
    y = A0 @ X0
    check(cur, "loss", "x", X0, (5,), expected=2 * np.einsum("bmk,bm->k", A0, y))
    check(cur, "loss", "A", A0, (2, 3, 5), expected=2 * np.einsum("bm,k->bmk", y, X0))


def test_vector_times_batch(cur):
    load(cur, "A", A0, (2, 3, 5)); load(cur, "x", rand(3), (3,))
    x = cur.execute("SELECT * FROM x").fetch_tensor()
    cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(MATMUL(x.v, A.v))) AS v FROM A, x")
    y = x @ A0
    check(cur, "loss", "x", x, (3,), expected=2 * np.einsum("bkn,bn->k", A0, y))
    check(cur, "loss", "A", A0, (2, 3, 5), expected=2 * np.einsum("k,bn->bkn", x, y))
