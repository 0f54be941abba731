-- the same, the small vector on the left: it is copied to every worker
SET workers = 2;
SET min_parallel_cost = 0;
CREATE TENSOR X SHAPE (4096, 512) TILE (128, 128) FILL ONES;
CREATE TENSOR s SHAPE (512) TILE (128) FILL CONSTANT(2);
EXPLAIN SELECT X.i, SUM(REDUCE_SUM(s.v * X.v, 1)) AS v FROM s JOIN X ON s.i = X.j GROUP BY X.i;
SET disabled_rules = 'broadcast_left_join';
EXPLAIN SELECT X.i, SUM(REDUCE_SUM(s.v * X.v, 1)) AS v FROM s JOIN X ON s.i = X.j GROUP BY X.i;
