-- FROM A, B, C, pick joins left to right as written; ordered by cost, the one-row table filters A first
SET workers = 1;
CREATE TENSOR A SHAPE (2048, 64) TILE (128, 64) FILL ONES;
CREATE TENSOR B SHAPE (64, 2048) TILE (64, 128) FILL ONES;
CREATE TENSOR C SHAPE (2048, 8) TILE (128, 8) FILL ONES;
CREATE TABLE pick (k INTEGER);
INSERT INTO pick VALUES (3);
EXPLAIN SELECT A.i, C.j, SUM(MATMUL(MATMUL(A.v, B.v), C.v)) AS v FROM A, B, C, pick WHERE A.j = B.i AND B.j = C.i AND A.i = pick.k GROUP BY A.i, C.j;
SET disabled_rules = 'join_ordering';
EXPLAIN SELECT A.i, C.j, SUM(MATMUL(MATMUL(A.v, B.v), C.v)) AS v FROM A, B, C, pick WHERE A.j = B.i AND B.j = C.i AND A.i = pick.k GROUP BY A.i, C.j;
