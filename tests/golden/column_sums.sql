-- grouped by a key the scan can hash on: local aggregation; a global aggregate: partial per worker, then final
SET workers = 2;
CREATE TENSOR T SHAPE (4096, 64) TILE (16, 32) FILL ONES;
EXPLAIN SELECT T.j, SUM(T.v) AS v FROM T GROUP BY T.j;
EXPLAIN SELECT SUM(SUMSQ(T.v)) AS total, COUNT(*) AS n FROM T;
