"""The 2-layer MLP loss the autodiff tests share: views hidden, out and loss over X, W1, W2, Y."""
from __future__ import annotations

MLP_VIEWS = (
    "CREATE VIEW hidden AS SELECT X.i, W1.j, RELU(SUM(MATMUL(X.v, W1.v))) AS v FROM X JOIN W1 "
    "ON X.j = W1.i GROUP BY X.i, W1.j",
    "CREATE VIEW out AS SELECT h.i, W2.j, SUM(MATMUL(h.v, W2.v)) AS v FROM hidden AS h JOIN W2 "
    "ON h.j = W2.i GROUP BY h.i, W2.j",
    "CREATE VIEW loss AS SELECT SUM(SUMSQ(o.v - Y.v)) AS v FROM out AS o JOIN Y ON o.i = Y.i AND o.j = Y.j",
)


def create_mlp_views(cur) -> None:
    for statement in MLP_VIEWS:
        cur.execute(statement)
