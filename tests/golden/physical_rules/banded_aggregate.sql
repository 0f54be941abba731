-- a product whose result does not fit in memory_limit: run in bands of A's rows, each reading B again; without
-- the rule, the products' sums spill
SET workers = 1;
SET dense_einsum_bytes = 0;
CREATE TENSOR A SHAPE (576, 32) TILE (16, 16) FILL RANDOM_NORMAL(0, 1, 1);
CREATE TENSOR B SHAPE (32, 576) TILE (16, 16) FILL RANDOM_NORMAL(0, 1, 2);
SET memory_limit = '2MB';
EXPLAIN SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j;
SET disabled_rules = 'banded_aggregate';
EXPLAIN SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j;
