"""The 2-layer MLP loss the autodiff tests share: views hidden, out and loss over X, W1, W2, Y."""
from __future__ import annotations

import numpy as np

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


def load_small_mlp(cur, rows: int = 8, w1_tile: tuple = (4, 3), w2_tile: tuple = (3, 1)) -> dict:
    """X (rows x 4), W1 (4 x 6), W2 (6 x 1) and Y (rows x 1), float32 from seed 0, stored in tiles of 4 rows
    (W1 and W2 in the tiles given), and the MLP views over them; returns the arrays by name."""
    rng = np.random.default_rng(0)
    tensors = {}
    for name, shape, tile in (("X", (rows, 4), (4, 4)), ("W1", (4, 6), w1_tile), ("W2", (6, 1), w2_tile),
                              ("Y", (rows, 1), (4, 1))):
        tensors[name] = rng.standard_normal(shape, dtype=np.float32)
        cur.execute(f"CREATE TENSOR {name} FROM ? TILE {tile}", [tensors[name]])
    create_mlp_views(cur)
    return tensors


def mlp_grad_w1(t: dict) -> np.ndarray:
    """numpy's d loss / d W1 of the MLP views (the oracle)."""
    H = np.maximum(t["X"] @ t["W1"], 0)
    d_hidden = ((2 * (H @ t["W2"] - t["Y"])) @ t["W2"].T) * (H > 0)
    return t["X"].T @ d_hidden
