-- a FULL join: both sides hashed on the join keys where they are scanned (a FULL join cannot broadcast);
-- without the rule, both are gathered and joined in one place
SET workers = 2;
SET min_parallel_cost = 0;
CREATE TENSOR X SHAPE (4096, 512) TILE (128, 128) FILL ONES;
CREATE TENSOR Y SHAPE (4096, 512) TILE (128, 128) FILL CONSTANT(2);
EXPLAIN SELECT COALESCE(X.i, Y.i) AS i, COALESCE(X.j, Y.j) AS j, X.v + Y.v AS v FROM X FULL JOIN Y ON X.i = Y.i AND X.j = Y.j;
SET disabled_rules = 'co_partitioned_join';
EXPLAIN SELECT COALESCE(X.i, Y.i) AS i, COALESCE(X.j, Y.j) AS j, X.v + Y.v AS v FROM X FULL JOIN Y ON X.i = Y.i AND X.j = Y.j;
