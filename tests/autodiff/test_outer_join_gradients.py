"""Gradients where an outer join brings in an absent tile: the tuple's lineage is partly NULL, its gradient is not."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from test_gradients import check, load, rand

W0, X0 = rand(4, 4), rand(4, 4)
X0[:2, :2] = 0  # X's tile (0, 0) is absent: X is loaded sparse on purpose (zeros are values in a dense load)


def _load(cur):
    load(cur, "W", W0, (2, 2))
    load(cur, "X", scipy.sparse.csr_matrix(X0), (2, 2))
    assert (0, 0) not in [tuple(r[:2]) for r in cur.execute("SELECT X.i, X.j, X.v FROM X").fetchall()]


DIFFERENCE = "SELECT W.i, W.j, W.v - X.v AS v FROM W LEFT JOIN X ON W.i = X.i AND W.j = X.j"
LOSSES = {
    "view": ["CREATE VIEW f AS " + DIFFERENCE, "CREATE VIEW loss AS SELECT SUM(SUMSQ(f.v)) AS v FROM f"],
    "subquery": [f"CREATE VIEW loss AS SELECT SUM(SUMSQ(f.v)) AS v FROM ({DIFFERENCE}) AS f"],
    "cte": [f"CREATE VIEW loss AS WITH f AS ({DIFFERENCE}) SELECT SUM(SUMSQ(f.v)) AS v FROM f"],
    "right join": ["CREATE VIEW loss AS SELECT SUM(SUMSQ(W.v - X.v)) AS v FROM X RIGHT JOIN W "
                   "ON W.i = X.i AND W.j = X.j"],
    "full join": ["CREATE VIEW f AS SELECT W.i, W.j, W.v - X.v AS v FROM X FULL JOIN W ON W.i = X.i AND W.j = X.j",
                  "CREATE VIEW loss AS SELECT SUM(SUMSQ(f.v)) AS v FROM f"],
    "joined again": ["CREATE VIEW f AS SELECT COALESCE(X.i, W.i) AS i, COALESCE(X.j, W.j) AS j, W.v - X.v AS v "
                     "FROM X FULL JOIN W ON W.i = X.i AND W.j = X.j",
                     "CREATE VIEW loss AS SELECT SUM(SUMSQ(f.v * W.v)) AS v FROM W JOIN f ON f.i = W.i AND f.j = W.j"],
    "grouped": ["CREATE VIEW f AS " + DIFFERENCE,
                "CREATE VIEW g AS SELECT f.i, SUM(f.v) AS v FROM f GROUP BY f.i",
                "CREATE VIEW loss AS SELECT SUM(SUMSQ(g.v)) AS v FROM g"],
}


@pytest.mark.parametrize("form", sorted(LOSSES))
def test_every_tile_gets_its_gradient_where_the_partner_is_absent(cur, form):
    _load(cur)
    for statement in LOSSES[form]:
        cur.execute(statement)
    grad = check(cur, "loss", "W", W0, (2, 2))
    if form not in ("grouped", "joined again"):
        np.testing.assert_allclose(grad, 2 * (W0 - X0), rtol=1e-9, atol=1e-9)
    assert np.all(np.abs(grad[:2, :2]) > 0)


def test_one_minimize_step_moves_every_tile(cur):
    _load(cur)
    for statement in LOSSES["view"]:
        cur.execute(statement)
    cur.execute("MINIMIZE loss WRT (W) WITH (optimizer = 'sgd', learning_rate = 0.1, steps = 1)")
    after = cur.execute("SELECT * FROM W").fetch_tensor()
    np.testing.assert_allclose(after, W0 - 0.1 * 2 * (W0 - X0), rtol=1e-9, atol=1e-12)
