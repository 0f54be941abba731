-- Tiled matrix multiply: C = A @ B as a join on the shared tile index and a SUM of tile products.
CREATE OR REPLACE TENSOR A SHAPE (1000, 800) TILE (256, 256) FILL RANDOM_NORMAL(0, 1, 42);
CREATE OR REPLACE TENSOR B SHAPE (800, 600) TILE (256, 256) FILL RANDOM_NORMAL(0, 1, 7);
CREATE OR REPLACE TENSOR C AS
    SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v
    FROM A JOIN B ON A.j = B.i
    GROUP BY A.i, B.j;
DESCRIBE C;
SELECT SUM(SUMSQ(C.v)) AS squared_norm, COUNT(*) AS tiles FROM C;
