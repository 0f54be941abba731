-- A block-sparse product: only one tile in ten of A is present, and only present tiles are multiplied.
CREATE OR REPLACE TENSOR noise SHAPE (2048, 2048) TILE (256, 256) FILL RANDOM_NORMAL(0, 1, 41);
CREATE OR REPLACE TENSOR A AS SELECT n.i, n.j, n.v FROM noise AS n WHERE (n.i * 7 + n.j * 3) % 10 = 0;
DROP TENSOR noise;
CREATE OR REPLACE TENSOR B SHAPE (2048, 512) TILE (256, 512) FILL RANDOM_NORMAL(0, 1, 42);
CREATE OR REPLACE TENSOR C AS SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j;
DESCRIBE A;
SELECT SUM(SUMSQ(C.v)) AS squared_norm FROM C;
