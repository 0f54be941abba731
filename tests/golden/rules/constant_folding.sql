-- a condition that always holds is removed; key arithmetic on constants is computed once
SET workers = 1;
CREATE TENSOR A SHAPE (64, 64) TILE (16, 16) FILL ONES;
EXPLAIN SELECT A.i, A.j, A.v FROM A WHERE 1 = 1 OR A.i = 2;
SET disabled_rules = 'constant_folding';
EXPLAIN SELECT A.i, A.j, A.v FROM A WHERE 1 = 1 OR A.i = 2;
