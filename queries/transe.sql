-- TransE knowledge-graph embeddings: an entity is a vector, a relation a translation, and a triple
-- (head, relation, tail) is likely when head + relation lies near tail. 500 entities and 10 relations of
-- 32 floats, one embedding a tuple (TILE (1, 32)); 2,000 triples in an ordinary table, each with a corrupted
-- tail (a random entity) as its negative. Trained with Adam on the margin ranking loss
--     mean over triples of RELU(1 + |h + r - t|^2 - |h + r - t'|^2),
-- every triple a join of the table with the embeddings by key. benchmarks/embeddings.py runs this shape at
-- 100,000 entities and up to a million triples against PyTorch.
CREATE OR REPLACE TABLE transe_triples AS
    SELECT CAST(hash(k) % 500 AS BIGINT) AS h, CAST(hash(k + 7) % 10 AS BIGINT) AS r,
           CAST((hash(k) % 500 + 37 * (hash(k + 7) % 10) + 1) % 500 AS BIGINT) AS t,
           CAST(hash(k + 13) % 500 AS BIGINT) AS t_neg
    FROM range(2000) AS s(k);
CREATE OR REPLACE TENSOR E SHAPE (500, 32) TILE (1, 32) FILL RANDOM_NORMAL(0, 0.1, 81);
CREATE OR REPLACE TENSOR R SHAPE (10, 32) TILE (1, 32) FILL RANDOM_NORMAL(0, 0.1, 82);
CREATE OR REPLACE VIEW transe_loss AS
    SELECT SUM(RELU(1 + SUMSQ(H.v + Q.v - T.v) - SUMSQ(H.v + Q.v - N.v))) / 2000 AS v
    FROM transe_triples AS X JOIN E AS H ON H.i = X.h JOIN R AS Q ON Q.i = X.r
         JOIN E AS T ON T.i = X.t JOIN E AS N ON N.i = X.t_neg;
MINIMIZE transe_loss WRT (E, R) WITH (optimizer = 'adam', learning_rate = 0.01, steps = 20);
-- how often the true tail is nearer to head + relation than the corrupted one
SELECT SUM(CAST(SUMSQ(H.v + Q.v - T.v) < SUMSQ(H.v + Q.v - N.v) AS float32)) / 2000 AS ranked_right
    FROM transe_triples AS X JOIN E AS H ON H.i = X.h JOIN R AS Q ON Q.i = X.r
         JOIN E AS T ON T.i = X.t JOIN E AS N ON N.i = X.t_neg;
