-- SUM and MAX over groups of one tuple are projections: B has one column of tiles, so A.j = B.i meets one tile of B
SET workers = 1;
CREATE TENSOR A SHAPE (64, 32) TILE (16, 32) FILL ONES;
CREATE TENSOR B SHAPE (32, 8) TILE (32, 8) FILL ONES;
EXPLAIN SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v, MAX(A.v) AS m FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j;
SET disabled_rules = 'single_row_groups';
EXPLAIN SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v, MAX(A.v) AS m FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j;
