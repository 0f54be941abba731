-- a kernel over a subquery's kernel runs as one projection: no intermediate tiles
SET workers = 1;
CREATE TENSOR A SHAPE (64, 64) TILE (16, 16) FILL ONES;
EXPLAIN SELECT S.j AS i, S.i AS j, SIGMOID(S.w) AS v FROM (SELECT A.i, A.j, A.v * 2 + 1 AS w FROM A) AS S;
SET disabled_rules = 'kernel_fusion';
EXPLAIN SELECT S.j AS i, S.i AS j, SIGMOID(S.w) AS v FROM (SELECT A.i, A.j, A.v * 2 + 1 AS w FROM A) AS S;
