-- A 64-64-10 MLP classifying the 8 x 8 handwritten digits (1,437 training and 360 test images of the
-- optical digits data, queries/data/README.md): ReLU hidden layer, softmax cross-entropy (CROSS_ENTROPY: one
-- value a row, stable, with its fused derivative), 200 full-batch Adam steps, each committed; then the
-- accuracy on the test images it never saw (ARGMAX of the logits against the digit).
CREATE OR REPLACE TENSOR pixels FROM 'queries/data/digits_train_pixels.npy' TILE (1437, 64) DTYPE float32;
CREATE OR REPLACE TENSOR X AS SELECT p.i, p.j, p.v / 16 AS v FROM pixels AS p;
CREATE OR REPLACE TENSOR Y FROM 'queries/data/digits_train_onehot.npy' TILE (1437, 10) DTYPE float32;
CREATE OR REPLACE TENSOR test_pixels FROM 'queries/data/digits_test_pixels.npy' TILE (360, 64) DTYPE float32;
CREATE OR REPLACE TENSOR test_X AS SELECT p.i, p.j, p.v / 16 AS v FROM test_pixels AS p;
CREATE OR REPLACE TENSOR test_Y FROM 'queries/data/digits_test_onehot.npy' TILE (360, 10) DTYPE float32;
CREATE OR REPLACE TENSOR W1 SHAPE (64, 64) TILE (64, 64) FILL RANDOM_NORMAL(0, 0.125, 31);
CREATE OR REPLACE TENSOR b1 SHAPE (64) TILE (64) FILL ZEROS;
CREATE OR REPLACE TENSOR W2 SHAPE (64, 10) TILE (64, 10) FILL RANDOM_NORMAL(0, 0.125, 32);
CREATE OR REPLACE TENSOR b2 SHAPE (10) TILE (10) FILL ZEROS;
CREATE OR REPLACE VIEW hidden AS SELECT h.i, h.j, RELU(h.v + b1.v) AS v
    FROM (SELECT X.i, W1.j, SUM(MATMUL(X.v, W1.v)) AS v FROM X JOIN W1 ON X.j = W1.i GROUP BY X.i, W1.j) AS h
    JOIN b1 ON b1.i = h.j;
CREATE OR REPLACE VIEW logits AS SELECT z.i, z.j, z.v + b2.v AS v
    FROM (SELECT h.i, W2.j, SUM(MATMUL(h.v, W2.v)) AS v FROM hidden AS h JOIN W2 ON h.j = W2.i GROUP BY h.i, W2.j) AS z
    JOIN b2 ON b2.i = z.j;
CREATE OR REPLACE VIEW loss AS SELECT SUM(REDUCE_SUM(CROSS_ENTROPY(z.v, Y.v, 1))) / 1437 AS v
    FROM logits AS z JOIN Y ON z.i = Y.i AND z.j = Y.j;
MINIMIZE loss WRT (W1, b1, W2, b2) WITH (optimizer = 'adam', learning_rate = 0.01, steps = 200);
-- the test images through the trained weights: a digit is right where its class has the largest logit
CREATE OR REPLACE VIEW test_logits AS SELECT z.i, z.j, z.v + b2.v AS v
    FROM (SELECT h.i, W2.j, SUM(MATMUL(h.v, W2.v)) AS v
          FROM (SELECT t.i, t.j, RELU(t.v + b1.v) AS v
                FROM (SELECT test_X.i, W1.j, SUM(MATMUL(test_X.v, W1.v)) AS v FROM test_X JOIN W1 ON test_X.j = W1.i
                      GROUP BY test_X.i, W1.j) AS t JOIN b1 ON b1.i = t.j) AS h
          JOIN W2 ON h.j = W2.i GROUP BY h.i, W2.j) AS z
    JOIN b2 ON b2.i = z.j;
SELECT SUM(REDUCE_SUM(CAST(ARGMAX(z.v, 1) = ARGMAX(test_Y.v, 1) AS float32))) / 360 AS test_accuracy
    FROM test_logits AS z JOIN test_Y ON z.i = test_Y.i AND z.j = test_Y.j;
