-- two products joined tile by tile, co_partitioned_join left out (with it, both rules find one plan here): the
-- right product stays where its aggregate placed it and the left moves to it; without the rule, a broadcast
SET workers = 2;
SET min_parallel_cost = 0;
SET dense_einsum_bytes = 0;
SET disabled_rules = 'co_partitioned_join';
CREATE TENSOR A SHAPE (1024, 1024) TILE (128, 128) FILL ONES;
CREATE TENSOR B SHAPE (1024, 1024) TILE (128, 128) FILL ONES;
CREATE TENSOR C SHAPE (1024, 1024) TILE (128, 128) FILL CONSTANT(2);
CREATE TENSOR D SHAPE (1024, 1024) TILE (128, 128) FILL CONSTANT(3);
EXPLAIN SELECT P.i, P.j, P.v * Q.v AS v FROM (SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j) AS P JOIN (SELECT C.i AS i, D.j AS j, SUM(MATMUL(C.v, D.v)) AS v FROM C JOIN D ON C.j = D.i GROUP BY C.i, D.j) AS Q ON P.i = Q.i AND P.j = Q.j;
SET disabled_rules = 'co_partitioned_join, co_partitioned_by_right_join';
EXPLAIN SELECT P.i, P.j, P.v * Q.v AS v FROM (SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j) AS P JOIN (SELECT C.i AS i, D.j AS j, SUM(MATMUL(C.v, D.v)) AS v FROM C JOIN D ON C.j = D.i GROUP BY C.i, D.j) AS Q ON P.i = Q.i AND P.j = Q.j;
