-- A 2-layer MLP (ReLU hidden layer) regressing a smooth target, trained with Adam.
CREATE TENSOR X SHAPE (2048, 32) TILE (512, 32) FILL RANDOM_NORMAL(0, 1, 21);
CREATE TENSOR teacher SHAPE (32, 1) TILE (32, 1) FILL RANDOM_NORMAL(0, 0.3, 22);
CREATE TENSOR Y AS SELECT X.i, t.j, TANH(SUM(MATMUL(X.v, t.v))) AS v
    FROM X JOIN teacher AS t ON X.j = t.i GROUP BY X.i, t.j;
CREATE TENSOR W1 SHAPE (32, 64) TILE (32, 64) FILL RANDOM_NORMAL(0, 0.2, 23);
CREATE TENSOR W2 SHAPE (64, 1) TILE (64, 1) FILL RANDOM_NORMAL(0, 0.2, 24);
CREATE VIEW hidden AS SELECT X.i, W1.j, RELU(SUM(MATMUL(X.v, W1.v))) AS v
    FROM X JOIN W1 ON X.j = W1.i GROUP BY X.i, W1.j;
CREATE VIEW output AS SELECT h.i, W2.j, SUM(MATMUL(h.v, W2.v)) AS v
    FROM hidden AS h JOIN W2 ON h.j = W2.i GROUP BY h.i, W2.j;
CREATE VIEW loss AS SELECT SUM(SUMSQ(o.v - Y.v)) / 2048 AS v FROM output AS o JOIN Y ON o.i = Y.i AND o.j = Y.j;
MINIMIZE loss WRT (W1, W2) WITH (optimizer = 'adam', learning_rate = 0.01, steps = 60);
