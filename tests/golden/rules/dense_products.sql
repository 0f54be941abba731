-- a product of two whole dense stored matrices, as a join and a SUM of tile products, runs on the whole arrays
SET workers = 2;
CREATE TENSOR A SHAPE (256, 192) TILE (64, 64) FILL ONES;
CREATE TENSOR B SHAPE (192, 128) TILE (64, 32) FILL ONES;
EXPLAIN SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j;
SET disabled_rules = 'dense_products';
EXPLAIN SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j;
