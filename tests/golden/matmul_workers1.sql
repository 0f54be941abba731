-- one worker: no exchanges at all (joined and summed tile by tile: dense_einsum_bytes = 0, else these small tensors are one DenseEinsum)
SET dense_einsum_bytes = 0;
SET workers = 1;
CREATE TENSOR A SHAPE (1024, 1024) TILE (256, 256) FILL ONES;
CREATE TENSOR B SHAPE (1024, 1024) TILE (256, 256) FILL ONES;
EXPLAIN SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j;
