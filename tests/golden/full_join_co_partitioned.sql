-- a FULL join cannot broadcast: both sides are hashed on the join keys (free for partitioned scans)
SET workers = 4;
CREATE TENSOR X SHAPE (512, 512) TILE (128, 128) FILL ONES;
CREATE TENSOR Y SHAPE (512, 512) TILE (128, 128) FILL CONSTANT(2);
EXPLAIN SELECT COALESCE(X.i, Y.i) AS i, COALESCE(X.j, Y.j) AS j, X.v + Y.v AS v FROM X FULL JOIN Y ON X.i = Y.i AND X.j = Y.j;
