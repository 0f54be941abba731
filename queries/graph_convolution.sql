-- One graph convolution layer, RELU(A @ X @ W), over a sparse adjacency: absent tiles cost nothing.
CREATE OR REPLACE TENSOR noise SHAPE (1024, 1024) TILE (128, 128) FILL RANDOM_UNIFORM(0, 1, 31);
-- about 1% of entries are edges; blocks far from the diagonal have none and are never stored
CREATE OR REPLACE TENSOR Adj AS SELECT n.i, n.j, CAST(n.v > 0.99 AS float32) AS v FROM noise AS n WHERE n.i - n.j BETWEEN -2 AND 2;
DROP TENSOR noise;
CREATE OR REPLACE TENSOR X SHAPE (1024, 16) TILE (128, 16) FILL RANDOM_NORMAL(0, 1, 32);
CREATE OR REPLACE TENSOR W SHAPE (16, 8) TILE (16, 8) FILL RANDOM_NORMAL(0, 0.5, 33);
CREATE OR REPLACE VIEW xw AS SELECT X.i, W.j, SUM(MATMUL(X.v, W.v)) AS v FROM X JOIN W ON X.j = W.i GROUP BY X.i, W.j;
CREATE OR REPLACE TENSOR H AS SELECT Adj.i, xw.j, RELU(SUM(MATMUL(Adj.v, xw.v))) AS v
    FROM Adj JOIN xw ON Adj.j = xw.i GROUP BY Adj.i, xw.j;
SELECT COUNT(*) AS adjacency_tiles FROM Adj;
SELECT SUM(SUMSQ(H.v)) AS squared_norm FROM H;
