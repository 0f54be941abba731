-- a product with an absent tile is absent: the FULL join's unmatched tuples would only hold zero tiles
SET workers = 1;
CREATE TENSOR A SHAPE (64, 64) TILE (16, 16) FILL ONES;
CREATE TENSOR B SHAPE (64, 64) TILE (16, 16) FILL CONSTANT(2);
EXPLAIN SELECT COALESCE(A.i, B.i) AS i, COALESCE(A.j, B.j) AS j, RELU(A.v * B.v) * 2 AS v FROM A FULL JOIN B ON A.i = B.i AND A.j = B.j;
SET disabled_rules = 'outer_join_elimination';
EXPLAIN SELECT COALESCE(A.i, B.i) AS i, COALESCE(A.j, B.j) AS j, RELU(A.v * B.v) * 2 AS v FROM A FULL JOIN B ON A.i = B.i AND A.j = B.j;
