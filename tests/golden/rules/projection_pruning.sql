-- a subquery's kernel that nothing reads is not computed
SET workers = 1;
CREATE TENSOR A SHAPE (64, 64) TILE (16, 16) FILL ONES;
EXPLAIN SELECT S.i, SUM(S.r) AS v FROM (SELECT A.i, A.j, RELU(A.v) AS r, EXP(A.v) AS e FROM A) AS S GROUP BY S.i;
SET disabled_rules = 'projection_pruning';
EXPLAIN SELECT S.i, SUM(S.r) AS v FROM (SELECT A.i, A.j, RELU(A.v) AS r, EXP(A.v) AS e FROM A) AS S GROUP BY S.i;
