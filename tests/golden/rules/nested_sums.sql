-- SUM by i of the SUMs by (i, j) of A's tiles, each met by two tiles of B: one SUM by i over the joined tiles
SET workers = 1;
CREATE TENSOR A SHAPE (64, 32) TILE (16, 8) FILL ONES;
CREATE TENSOR B SHAPE (32, 16) TILE (8, 8) FILL ONES;
EXPLAIN SELECT p.i, SUM(p.v) AS v FROM (SELECT A.i, B.j, SUM(A.v) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j) AS p GROUP BY p.i;
SET disabled_rules = 'nested_sums';
EXPLAIN SELECT p.i, SUM(p.v) AS v FROM (SELECT A.i, B.j, SUM(A.v) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j) AS p GROUP BY p.i;
