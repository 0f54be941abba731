-- row sums of X scaled by a small vector: the vector is copied to every worker and X stays hashed on i, where
-- the aggregate wants it; without the rule, X is hashed on the join key and moved again for the aggregate
SET workers = 2;
SET min_parallel_cost = 0;
CREATE TENSOR X SHAPE (4096, 512) TILE (128, 128) FILL ONES;
CREATE TENSOR s SHAPE (512) TILE (128) FILL CONSTANT(2);
EXPLAIN SELECT X.i, SUM(REDUCE_SUM(X.v * s.v, 1)) AS v FROM X JOIN s ON X.j = s.i GROUP BY X.i;
SET disabled_rules = 'broadcast_right_join';
EXPLAIN SELECT X.i, SUM(REDUCE_SUM(X.v * s.v, 1)) AS v FROM X JOIN s ON X.j = s.i GROUP BY X.i;
