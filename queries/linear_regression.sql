-- Linear regression trained with MINIMIZE: recover W_true from X and Y = X @ W_true.
CREATE OR REPLACE TENSOR X SHAPE (4000, 16) TILE (1000, 16) FILL RANDOM_NORMAL(0, 1, 1);
CREATE OR REPLACE TENSOR W_true SHAPE (16, 1) TILE (16, 1) FILL RANDOM_NORMAL(0, 1, 2);
CREATE OR REPLACE TENSOR Y AS SELECT X.i, W_true.j, SUM(MATMUL(X.v, W_true.v)) AS v
    FROM X JOIN W_true ON X.j = W_true.i GROUP BY X.i, W_true.j;
CREATE OR REPLACE TENSOR W SHAPE (16, 1) TILE (16, 1) FILL CONSTANT(0.01);
CREATE OR REPLACE VIEW prediction AS SELECT X.i, W.j, SUM(MATMUL(X.v, W.v)) AS v
    FROM X JOIN W ON X.j = W.i GROUP BY X.i, W.j;
CREATE OR REPLACE VIEW loss AS SELECT SUM(SUMSQ(p.v - Y.v)) / 4000 AS v
    FROM prediction AS p JOIN Y ON p.i = Y.i AND p.j = Y.j;
MINIMIZE loss WRT (W) WITH (optimizer = 'sgd', learning_rate = 0.5, steps = 60);
SELECT SUM(SUMSQ(W.v - T.v)) AS squared_error_of_w FROM W JOIN W_true AS T ON W.i = T.i AND W.j = T.j;
