-- per-tuple work stays in the workers; sort and limit run after the gather
SET workers = 2;
CREATE TENSOR A SHAPE (1024, 1024) TILE (128, 128) FILL ONES;
EXPLAIN SELECT A.i, A.j, SIGMOID(A.v * 2 + 1) AS v FROM A WHERE A.i = A.j;
EXPLAIN SELECT A.i, A.j FROM A WHERE A.i < 2 ORDER BY i, j DESC LIMIT 3;
