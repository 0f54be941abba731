-- Logistic regression with MINIMIZE (Adam) on a linearly separable set of 20,000 points.
CREATE OR REPLACE TENSOR X SHAPE (20000, 8) TILE (2000, 8) FILL RANDOM_NORMAL(0, 1, 11);
CREATE OR REPLACE TENSOR direction SHAPE (8, 1) TILE (8, 1) FILL RANDOM_NORMAL(0, 1, 12);
CREATE OR REPLACE TENSOR Y AS SELECT X.i, d.j, CAST(SUM(MATMUL(X.v, d.v)) > 0 AS float32) AS v
    FROM X JOIN direction AS d ON X.j = d.i GROUP BY X.i, d.j;
CREATE OR REPLACE TENSOR w SHAPE (8, 1) TILE (8, 1) FILL RANDOM_NORMAL(0, 0.01, 13);
CREATE OR REPLACE VIEW logits AS SELECT X.i, w.j, SUM(MATMUL(X.v, w.v)) AS v FROM X JOIN w ON X.j = w.i GROUP BY X.i, w.j;
CREATE OR REPLACE VIEW loss AS SELECT SUM(REDUCE_SUM(BCE_WITH_LOGITS(z.v, Y.v))) / 20000 AS v
    FROM logits AS z JOIN Y ON z.i = Y.i AND z.j = Y.j;
MINIMIZE loss WRT (w) WITH (optimizer = 'adam', learning_rate = 0.1, steps = 40);
-- training accuracy: the fraction of points whose logit has the sign of its label
SELECT SUM(REDUCE_SUM(CAST((z.v > 0) = (Y.v > 0.5) AS float32))) / 20000 AS accuracy
    FROM logits AS z JOIN Y ON z.i = Y.i AND z.j = Y.j;
