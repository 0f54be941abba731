-- key conditions on one side of an inner join go below it; the condition on both sides becomes a join key
SET workers = 1;
CREATE TENSOR A SHAPE (64, 64) TILE (16, 16) FILL ONES;
CREATE TENSOR B SHAPE (64, 64) TILE (16, 16) FILL ONES;
EXPLAIN SELECT A.i, B.j, A.v * B.v AS v FROM A JOIN B ON A.j = B.i WHERE A.i < 2 AND B.j = 1 AND A.i = B.j;
EXPLAIN SELECT S.i, S.j FROM (SELECT A.j AS i, A.i AS j FROM A) AS S WHERE S.i = 3;
SET disabled_rules = 'predicate_pushdown';
EXPLAIN SELECT A.i, B.j, A.v * B.v AS v FROM A JOIN B ON A.j = B.i WHERE A.i < 2 AND B.j = 1 AND A.i = B.j;
