-- SUM over a join with a unique-keyed side: summed before the join (M has one tuple per i)
SET workers = 1;
CREATE TENSOR A SHAPE (64, 64) TILE (16, 16) FILL ONES;
CREATE TENSOR M (i) SHAPE (64) TILE (16) FILL ONES;
CREATE TENSOR S (j) SHAPE (64) TILE (16) FILL ONES;
EXPLAIN SELECT A.i, SUM(A.v) AS v FROM A JOIN M ON A.i = M.i GROUP BY A.i;
EXPLAIN SELECT S.j, SUM(A.v * S.v) AS v FROM A JOIN S ON A.j = S.j GROUP BY S.j;
SET disabled_rules = 'aggregate_pushdown';
EXPLAIN SELECT A.i, SUM(A.v) AS v FROM A JOIN M ON A.i = M.i GROUP BY A.i;
