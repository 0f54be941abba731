-- a total over every tile: each worker sums its part and the partial sums are gathered; without the rule, every
-- tile is gathered to one aggregate
SET workers = 2;
SET min_parallel_cost = 0;
CREATE TENSOR X SHAPE (4096, 512) TILE (128, 128) FILL ONES;
EXPLAIN SELECT SUM(SUMSQ(X.v)) AS v FROM X;
SET disabled_rules = 'two_phase_aggregate';
EXPLAIN SELECT SUM(SUMSQ(X.v)) AS v FROM X;
