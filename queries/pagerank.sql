-- PageRank by power iteration: r <- 0.85 * M r + 0.15 / n, with M the column-normalised adjacency.
CREATE OR REPLACE TENSOR noise SHAPE (512, 512) TILE (128, 128) FILL RANDOM_UNIFORM(0, 1, 51);
CREATE OR REPLACE TENSOR I SHAPE (512, 512) TILE (128, 128) FILL IDENTITY;
-- a sparse random graph plus a self-loop on every node (so no column sums to zero)
CREATE OR REPLACE TENSOR Adj AS SELECT COALESCE(n.i, I.i) AS i, COALESCE(n.j, I.j) AS j, CAST(n.v > 0.97 AS float32) + I.v AS v
    FROM noise AS n FULL JOIN I ON n.i = I.i AND n.j = I.j;
CREATE OR REPLACE TENSOR degree AS SELECT Adj.j AS i, SUM(REDUCE_SUM(Adj.v, 0)) AS v FROM Adj GROUP BY Adj.j;
CREATE OR REPLACE TENSOR M AS SELECT Adj.i, Adj.j, Adj.v / d.v AS v FROM Adj JOIN degree AS d ON Adj.j = d.i;
CREATE OR REPLACE TENSOR r SHAPE (512, 1) TILE (128, 1) FILL CONSTANT(0.001953125);
UPDATE r SET v = 0.85 * p.v + 0.15 / 512 FROM (SELECT M.i, SUM(MATMUL(M.v, x.v)) AS v FROM M JOIN r AS x ON M.j = x.i GROUP BY M.i) AS p WHERE r.i = p.i;
UPDATE r SET v = 0.85 * p.v + 0.15 / 512 FROM (SELECT M.i, SUM(MATMUL(M.v, x.v)) AS v FROM M JOIN r AS x ON M.j = x.i GROUP BY M.i) AS p WHERE r.i = p.i;
UPDATE r SET v = 0.85 * p.v + 0.15 / 512 FROM (SELECT M.i, SUM(MATMUL(M.v, x.v)) AS v FROM M JOIN r AS x ON M.j = x.i GROUP BY M.i) AS p WHERE r.i = p.i;
UPDATE r SET v = 0.85 * p.v + 0.15 / 512 FROM (SELECT M.i, SUM(MATMUL(M.v, x.v)) AS v FROM M JOIN r AS x ON M.j = x.i GROUP BY M.i) AS p WHERE r.i = p.i;
UPDATE r SET v = 0.85 * p.v + 0.15 / 512 FROM (SELECT M.i, SUM(MATMUL(M.v, x.v)) AS v FROM M JOIN r AS x ON M.j = x.i GROUP BY M.i) AS p WHERE r.i = p.i;
UPDATE r SET v = 0.85 * p.v + 0.15 / 512 FROM (SELECT M.i, SUM(MATMUL(M.v, x.v)) AS v FROM M JOIN r AS x ON M.j = x.i GROUP BY M.i) AS p WHERE r.i = p.i;
UPDATE r SET v = 0.85 * p.v + 0.15 / 512 FROM (SELECT M.i, SUM(MATMUL(M.v, x.v)) AS v FROM M JOIN r AS x ON M.j = x.i GROUP BY M.i) AS p WHERE r.i = p.i;
UPDATE r SET v = 0.85 * p.v + 0.15 / 512 FROM (SELECT M.i, SUM(MATMUL(M.v, x.v)) AS v FROM M JOIN r AS x ON M.j = x.i GROUP BY M.i) AS p WHERE r.i = p.i;
-- the ranks sum to one; the top pages
SELECT SUM(REDUCE_SUM(r.v)) AS total FROM r;
SELECT r.i AS block, REDUCE_MAX(r.v) AS best_rank_in_block FROM r ORDER BY block;
