-- the projections that only rename a subquery's columns are removed
SET workers = 1;
CREATE TENSOR A SHAPE (64, 64) TILE (16, 16) FILL ONES;
EXPLAIN SELECT * FROM (SELECT * FROM A) AS S;
SET disabled_rules = 'redundant_rekey_removal';
EXPLAIN SELECT * FROM (SELECT * FROM A) AS S;
